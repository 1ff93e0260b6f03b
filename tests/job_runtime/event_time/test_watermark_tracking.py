"""Watermarks combine as minimums that only move forward: over a source task's splits
(an idle split does not hold time back, an ended one never again) and over a keyed
task's channels (an idle channel neither)."""

from __future__ import annotations

import numpy as np

from job_runtime import watermarks
from job_runtime.execution.subtask.watermark_tracking import ChannelWatermarks, SplitWatermarks
from job_runtime.watermarks import MAX_WATERMARK


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def stamps(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def tracker(clock: Clock, *, idle_after: str | None = None) -> SplitWatermarks:
    strategy = watermarks.bounded_out_of_orderness("ts", max_delay="5s", idle_after=idle_after)
    return SplitWatermarks(strategy=strategy, clock=clock)


def test_a_source_tasks_watermark_is_its_slowest_splits_newest_time_minus_the_delay() -> None:
    t = tracker(Clock())
    t.add_split(0)
    t.add_split(1)
    t.observe(0, stamps(10_000, 30_000))
    assert t.advance() is None, "split 1 has read nothing: time stays at the start"
    t.observe(1, stamps(20_000))
    assert t.advance() == 20_000 - 5_000 - 1
    t.observe(1, stamps(12_000))  # older than its newest: nothing moves back
    assert t.advance() is None
    t.observe(1, stamps(40_000))
    assert t.advance() == 30_000 - 5_000 - 1


def test_an_idle_split_stops_holding_time_back_and_a_task_with_only_idle_splits_is_idle() -> None:
    clock = Clock()
    t = tracker(clock, idle_after="1m")
    t.add_split(0)
    t.add_split(1)
    t.observe(0, stamps(100_000))
    assert t.advance() is None and not t.idle
    clock.now += 61
    t.observe(0, stamps(110_000))
    assert t.advance() == 110_000 - 5_001, "split 1 read nothing for a minute"
    clock.now += 61
    assert t.advance() is None and t.idle
    t.observe(1, stamps(50_000))
    assert t.advance() is None and not t.idle, "a split that reads again is active again"


def test_splits_that_all_ended_give_the_end_of_time() -> None:
    t = tracker(Clock())
    t.add_split(0)
    t.add_split(1)
    t.observe(0, stamps(1_000))
    t.end_split(0)
    t.observe(1, stamps(2_000))
    assert t.advance() == 2_000 - 5_001
    t.end_split(1)
    assert t.advance() == MAX_WATERMARK


def test_a_keyed_tasks_watermark_is_its_slowest_channels_and_ignores_idle_ones() -> None:
    c = ChannelWatermarks(channels=3)
    assert c.on_watermark(0, 50) is None
    assert c.on_watermark(1, 70) is None
    assert c.on_idle(2) == 50
    assert c.on_watermark(0, 90) == 70
    assert c.on_watermark(0, 60) is None, "a channel never moves back"
    c.on_data(2)
    assert c.on_watermark(1, 100) is None, "channel 2 has records again and holds time at its own"
    assert c.on_idle(0) is None and not c.all_idle
    assert c.on_idle(1) is None and c.on_idle(2) is None
    assert c.all_idle and c.current == 70
