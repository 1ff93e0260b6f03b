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


def committed_intervals(dsn: str, *, job: str, checkpoint_id: int) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM cjob_committed WHERE job = %s AND "
                           "checkpoint = %s", (job, checkpoint_id)).fetchone()
    assert row is not None
    return int(row[0])


def test_a_new_job_restored_from_another_jobs_checkpoint_writes_every_total_once(
        postgres_dsn: str, harness: JobHarness) -> None:
    """Job A is killed before checkpoint 5's metadata, after it sent checkpoint 4's
    intervals and deleted their files. Job B (a new uid, its own store: A created
    again, or a new job from A's state) restores A's checkpoint 4: A's committer says
    those intervals arrived, so B neither sends them again nor fails for their files."""
    first = harness.run(entrypoint="job:build", args=job_args(postgres_dsn), attempt=1,
                        python_path=[str(EXAMPLE)],
                        env={"CJOB_FAULTS": "driver.before-metadata@5"})
    assert first.returncode == -9, first.explain()
    assert committed_intervals(postgres_dsn, job=f"{harness.name}-{harness.uid}",
                               checkpoint_id=4) > 0, "checkpoint 4 was not sent: no test"
    checkpoint = harness.checkpoints / f"{harness.name}-{harness.uid}" / "chk-4" / "_metadata"

    second = JobHarness(harness.base)
    second.store = harness.base / "store-of-the-new-job"
    run = second.run(entrypoint="job:build", args=job_args(postgres_dsn), attempt=1,
                     python_path=[str(EXAMPLE)],
                     extra=["--restore", checkpoint.as_uri(), "--allow-foreign-restore"])
    assert run.returncode == 0, run.explain()
    assert run.status is not None and run.status["restoredFrom"]["id"] == 4
    assert verify.verify(verify.read_rows(postgres_dsn, "totals"), count=COUNT) == []
