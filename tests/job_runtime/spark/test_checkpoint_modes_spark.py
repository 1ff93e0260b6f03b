"""At-least-once and unaligned checkpoints through a crashed subtask, on real Spark."""

from __future__ import annotations

import collections

from runtime_harness import JobHarness

COUNT = 8000
RATE = 1000


def test_at_least_once_loses_no_record_when_a_subtask_crashes(harness: JobHarness) -> None:
    marker = harness.base / "crashed"
    run = harness.run(entrypoint="crashing_jobs:echo", args={
        "count": COUNT, "rate": RATE, "output": str(harness.output),
        "crash_at": 2500, "crash_marker": str(marker)},
        extra=["--checkpoint-mode", "at_least_once"])

    assert run.returncode == 0, run.explain()
    assert marker.exists()
    assert run.status is not None and run.status["subtaskRestarts"] >= 1
    seen = collections.Counter(r["seq"] for r in harness.output_records())
    missing = [seq for seq in range(COUNT) if seq not in seen]
    assert missing == [], f"{len(missing)} records lost, e.g. {missing[:10]}"
    assert set(seen) == set(range(COUNT))


def test_unaligned_checkpoints_stay_exactly_once_when_a_subtask_crashes(
        harness: JobHarness) -> None:
    marker = harness.base / "crashed"
    # A slow reduce builds up in-flight data, which unaligned barriers overtake
    # and persist as channel state.
    run = harness.run(entrypoint="crashing_jobs:running_sum", args={
        "count": COUNT, "rate": RATE, "output": str(harness.output), "reduce_delay": 0.001,
        "crash_at": 2500, "crash_marker": str(marker)},
        extra=["--unaligned", "--credits", "2"])

    assert run.returncode == 0, run.explain()
    assert marker.exists()
    assert run.status is not None and run.status["subtaskRestarts"] >= 1
    assert run.status["restoredFrom"] is not None
    assert harness.running_sum_problems(count=COUNT) == []


def test_unaligned_final_checkpoint_keeps_the_records_still_in_flight(
        harness: JobHarness) -> None:
    # No rate limit and a slow reduce: the sources finish while their last buffers
    # still wait in the reduce's input queues, so the final barrier has data to
    # overtake. Every one of those records must reach the committed output.
    count = 3000
    run = harness.run(entrypoint="crashing_jobs:running_sum", args={
        "count": count, "output": str(harness.output), "reduce_delay": 0.002},
        extra=["--unaligned", "--credits", "2"])

    assert run.returncode == 0, run.explain()
    assert harness.running_sum_problems(count=count) == []
