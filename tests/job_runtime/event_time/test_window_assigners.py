"""Which windows a timestamp falls in: tumbling windows hold it once, sliding windows as
often as they overlap, aligned to the epoch (plus an offset) for negative times too;
sizes that cannot work are refused when the pipeline is built."""

from __future__ import annotations

import numpy as np
import pytest

from job_runtime import windows
from job_runtime.errors import PipelineDefinitionError


def membership(assigner: windows.WindowAssigner, stamps: list[int]) -> dict[int, list[int]]:
    """Window start -> the timestamps assigned to it."""
    array = np.array(stamps, dtype=np.int64)
    return {start: sorted(array[rows].tolist()) for start, rows in assigner.assign(array)}


def test_a_tumbling_window_holds_each_timestamp_in_the_one_window_around_it() -> None:
    found = membership(windows.tumbling("1m"), [0, 59_999, 60_000, 125_000, -1, -60_000])
    assert found == {0: [0, 59_999], 60_000: [60_000], 120_000: [125_000],
                     -60_000: [-60_000, -1]}


def test_an_offset_moves_every_window_start() -> None:
    found = membership(windows.tumbling("1m", offset="15s"), [14_999, 15_000, 74_999])
    assert found == {-45_000: [14_999], 15_000: [15_000, 74_999]}


def test_a_sliding_window_holds_a_timestamp_in_every_window_that_covers_it() -> None:
    assigner = windows.sliding("30s", every="10s")
    found = membership(assigner, [25_000])
    assert found == {0: [25_000], 10_000: [25_000], 20_000: [25_000]}
    rng = np.random.default_rng(1)
    stamps = rng.integers(-100_000, 100_000, size=500).tolist()
    for start, members in membership(assigner, stamps).items():
        assert start % 10_000 == 0
        assert all(start <= t < start + 30_000 for t in members)
    assert sum(len(m) for m in membership(assigner, stamps).values()) == 3 * len(stamps)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: windows.tumbling("0s"), "positive"),
    (lambda: windows.tumbling("soon"), "duration"),
    (lambda: windows.tumbling(-5), "positive"),
    (lambda: windows.sliding("1m", every="7s"), "must divide"),
    (lambda: windows.sliding("1m", every="2m"), "must divide"),
    (lambda: windows.tumbling("0.1ms"), "at least 1ms"),
])
def test_a_window_size_that_cannot_work_is_one_line_at_build_time(make: object,
                                                                  message: str) -> None:
    with pytest.raises(PipelineDefinitionError, match=message):
        make()  # type: ignore[operator]


def test_numbers_are_seconds_and_strings_are_durations() -> None:
    assert windows.tumbling(90).size == 90_000
    assert windows.tumbling("1m30s").size == 90_000
    assert windows.sliding("1h", every="15m").slide == 900_000
