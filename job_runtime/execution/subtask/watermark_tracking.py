"""Combining watermarks: over a source task's splits, and over a keyed task's channels.

Both are minimums over inputs that may be idle. An idle input does not hold the
minimum back; when every input is idle, nothing advances and the task tells its
downstream it is idle too, so a quiet subtask does not stall the whole job. Both
only ever move forward: what a task sent downstream is a promise.

Watermarks are not part of the checkpoint here: after a restore every split and
channel starts from the minimum again and advances as records come. What must
survive a restore, the time up to which a windowed operator already fired, is kept
by that operator in its state (see :mod:`job_runtime.operators.window_aggregate`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from job_runtime.watermarks import MAX_WATERMARK, MIN_WATERMARK, WatermarkStrategy


class SplitWatermarks:
    """The source task's watermark from the newest event time of each of its splits.

    ``strategy_of`` gives a split's own strategy when the splits are of several
    sources (a union), each with its own delay and idleness; ``strategy`` otherwise.
    """

    def __init__(self, *, strategy: WatermarkStrategy,
                 clock: Callable[[], float] = time.monotonic,
                 strategy_of: Callable[[int], WatermarkStrategy] | None = None) -> None:
        self.strategy = strategy
        self._strategy_of = strategy_of or (lambda split: strategy)
        self._clock = clock
        self._newest: dict[int, int] = {}
        self._last_read: dict[int, float] = {}
        self._ended: set[int] = set()
        self.emitted = MIN_WATERMARK
        self.idle = False

    def add_split(self, split: int) -> None:
        """A split this task reads from now on (it holds time back until it reads)."""
        self._newest.setdefault(split, MIN_WATERMARK)
        self._last_read.setdefault(split, self._clock())

    def observe(self, split: int, event_times: np.ndarray) -> None:
        if len(event_times):
            newest = int(event_times.max())
            if newest > self._newest.get(split, MIN_WATERMARK):
                self._newest[split] = newest
        self._last_read[split] = self._clock()

    def end_split(self, split: int) -> None:
        """A bounded split ended: it holds nothing back any more."""
        self._ended.add(split)

    def advance(self) -> int | None:
        """The new watermark to send, if it moved forward; sets :attr:`idle` when
        every split that has not ended is idle."""
        now = self._clock()
        strategy_of = self._strategy_of
        active = [s for s in self._newest
                  if s not in self._ended and not self._idle(s, now=now)]
        if not active:
            if self._newest and len(self._ended) == len(self._newest):
                return self._move(MAX_WATERMARK)
            self.idle = True  # a task without splits holds nothing back either
            return None
        self.idle = False
        return self._move(min(strategy_of(s).watermark_for(self._newest[s]) for s in active))

    def _idle(self, split: int, *, now: float) -> bool:
        idle_after = self._strategy_of(split).idle_after
        return idle_after is not None and (now - self._last_read[split]) * 1000.0 >= idle_after

    def _move(self, watermark: int) -> int | None:
        if watermark > self.emitted:
            self.emitted = watermark
            return watermark
        return None


class ChannelWatermarks:
    """A keyed task's watermark: the minimum over its input channels that are not idle."""

    def __init__(self, *, channels: int) -> None:
        self._marks = [MIN_WATERMARK] * channels
        self._idle = [False] * channels
        self.current = MIN_WATERMARK

    def on_watermark(self, channel: int, watermark: int) -> int | None:
        if watermark > self._marks[channel]:
            self._marks[channel] = watermark
        self._idle[channel] = False
        return self._advance()

    def on_idle(self, channel: int) -> int | None:
        self._idle[channel] = True
        return self._advance()

    def on_data(self, channel: int) -> None:
        """Records on an idle channel make it hold time back again."""
        self._idle[channel] = False

    @property
    def all_idle(self) -> bool:
        return all(idle or mark == MAX_WATERMARK
                   for idle, mark in zip(self._idle, self._marks, strict=True))

    def _advance(self) -> int | None:
        active = [mark for mark, idle in zip(self._marks, self._idle, strict=True) if not idle]
        if not active:
            return None
        combined = min(active)
        if combined > self.current:
            self.current = combined
            return combined
        return None
