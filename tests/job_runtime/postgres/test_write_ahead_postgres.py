"""The write-ahead sink into a real PostgreSQL, on real Spark: the example job
``examples/postgres_totals`` killed at the points where a write-ahead sink can lose or
duplicate an interval, and every running sum in the table exactly once afterwards.
"""

from __future__ import annotations

from typing import Any

from paths import REPO
from runtime_harness import JobHarness, load_example

EXAMPLE = REPO / "examples" / "postgres_totals"
COUNT = 6000
RATE = 1500  # records per second: about eight checkpoints of 0.5 s

verify = load_example("examples/postgres_totals/verify.py")


def job_args(dsn: str) -> dict[str, Any]:
    return {"dsn": dsn, "count": COUNT, "rate": RATE, "table": "totals"}


def run_killed_then_restored(harness: JobHarness, *, dsn: str, fault: str) -> None:
    first = harness.run(entrypoint="job:build", args=job_args(dsn), attempt=1,
                        python_path=[str(EXAMPLE)], env={"CJOB_FAULTS": fault})
    if fault.startswith("driver."):
        assert first.returncode == -9, first.explain()
        second = harness.run(entrypoint="job:build", args=job_args(dsn), attempt=2,
                             python_path=[str(EXAMPLE)], extra=["--restore", "latest"])
        assert second.returncode == 0, second.explain()
        assert second.status is not None and second.status["restoredFrom"] is not None
    else:  # a subtask's worker dies: Spark runs the stage again within the attempt
        assert first.returncode == 0, first.explain()
        assert first.status is not None


def test_a_driver_killed_after_a_checkpoint_but_before_its_send_loses_and_repeats_nothing(
        postgres_dsn: str, harness: JobHarness) -> None:
    run_killed_then_restored(harness, dsn=postgres_dsn, fault="driver.before-notify@3")
    assert verify.verify(verify.read_rows(postgres_dsn, "totals"), count=COUNT) == []


def test_a_subtask_killed_between_the_send_and_the_commit_does_not_send_again(
        postgres_dsn: str, harness: JobHarness) -> None:
    """The example writes the committer's row in the send's transaction: the restore
    finds the interval committed although the sink never called ``commit``."""
    run_killed_then_restored(harness, dsn=postgres_dsn,
                             fault="subtask.write-ahead-after-send@2")
    fired = list(harness.faults_dir.iterdir())
    assert fired, "the fault never fired: the test proves nothing"
    assert verify.verify(verify.read_rows(postgres_dsn, "totals"), count=COUNT) == []
