"""The ``dataframe`` source: a Spark DataFrame staged once, read exactly once."""

from __future__ import annotations

from runtime_harness import JobHarness

COUNT = 3000


def test_a_dataframe_source_is_staged_once_and_read_exactly_once_across_a_crash(
        harness: JobHarness) -> None:
    marker = harness.base / "crashed"
    # A slow reduce paces the job, so checkpoints complete before the crash.
    run = harness.run(entrypoint="crashing_jobs:dataframe_running_sum", args={
        "count": COUNT, "output": str(harness.output), "reduce_delay": 0.003,
        "crash_at": COUNT * 4 // 5, "crash_marker": str(marker)})

    assert run.returncode == 0, run.explain()
    assert marker.exists()
    assert run.status is not None and run.status["subtaskRestarts"] >= 1
    assert run.status["restoredFrom"] is not None
    assert harness.running_sum_problems(count=COUNT) == []
    staged = list(harness.checkpoints.rglob("staging/numbers.attempts/attempt-1-*/_SUCCESS"))
    assert len(staged) == 1, "the DataFrame was not staged under the job's staging area"
    assert len(list(staged[0].parent.glob("*.parquet"))) >= 1
