"""``aggregate`` with its combiner stays exactly-once through a crashed subtask, on real Spark.

The combiner holds records between barriers; these runs show that a crash loses
none of them and counts none twice, with aligned and with unaligned checkpoints
(where partial rows in flight become channel state and are replayed).
"""

from __future__ import annotations

import pytest
from aggregate_jobs import problems
from runtime_harness import JobHarness

COUNT = 8000
RATE = 1000


@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_aggregates_stay_exactly_once_when_a_subtask_crashes(harness: JobHarness,
                                                             unaligned: bool) -> None:
    marker = harness.base / "crashed"
    run = harness.run(entrypoint="aggregate_jobs:counted", args={
        "count": COUNT, "rate": RATE, "output": str(harness.output), "pause": 0.02,
        "crash_at": 2500, "crash_marker": str(marker)},
        extra=["--unaligned", "--credits", "2"] if unaligned else [])

    assert run.returncode == 0, run.explain()
    assert marker.exists()
    assert run.status is not None and run.status["subtaskRestarts"] >= 1
    assert run.status["restoredFrom"] is not None
    assert problems(harness.output_records(), count=COUNT) == []


def test_an_unthrottled_aggregate_ends_with_exact_totals(harness: JobHarness) -> None:
    count = 300_000
    run = harness.run(entrypoint="aggregate_jobs:counted", args={
        "count": count, "output": str(harness.output)})

    assert run.returncode == 0, run.explain()
    assert problems(harness.output_records(), count=count) == []
