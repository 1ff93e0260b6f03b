"""A recreated job continues a deleted job's retained checkpoint, only when told to.

Job A (one uid) is killed while committing checkpoint 4, leaving checkpoints 1-3 and
their output. Job B has A's name but a new uid, as a job deleted with
``cleanupPolicy: Retain`` and created again has, and its own, empty store. B names A's
checkpoint 2 in ``restore.from``: refused without ``allowForeignJob``; with it, B
continues A's state, withdraws A's output newer than checkpoint 2, and the output
holds every running sum exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_harness import Finished, JobHarness

from cjob_spec.exit_codes import ExitCode

COUNT = 8000
RATE = 1000


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory,
         new_harness: Callable[[Path], JobHarness]) -> tuple[JobHarness, JobHarness, Finished]:
    base = tmp_path_factory.mktemp("foreign")
    first = new_harness(base)
    run = first.run(entrypoint="crashing_jobs:running_sum", attempt=1, args=job_args(first),
                    env={"CJOB_FAULTS": "driver.before-metadata@4"})
    second = new_harness(base)
    second.store = base / "store-recreated"
    assert second.uid != first.uid
    return first, second, run


def job_args(harness: JobHarness) -> dict[str, Any]:
    return {"count": COUNT, "rate": RATE, "output": str(harness.output)}


def metadata_of(harness: JobHarness, checkpoint_id: int) -> Path:
    return harness.checkpoints / f"{harness.name}-{harness.uid}" / f"chk-{checkpoint_id}" / \
        "_metadata"


def part_files(harness: JobHarness, checkpoint_id: int) -> list[Path]:
    return sorted(harness.output.glob(f"part-*-{checkpoint_id:010d}-*"))


def test_the_first_job_leaves_checkpoints_and_output_newer_than_the_one_restored(
        jobs: tuple[JobHarness, JobHarness, Finished]) -> None:
    first, _, run = jobs
    assert run.returncode == -9, run.explain()
    assert metadata_of(first, 2).exists() and metadata_of(first, 3).exists()
    assert part_files(first, 3), "checkpoint 3's output should be committed: the test " \
                                 "needs output newer than the restored checkpoint"


def test_another_jobs_checkpoint_is_refused_without_the_opt_in(
        jobs: tuple[JobHarness, JobHarness, Finished]) -> None:
    first, second, _ = jobs
    before = sorted(p.name for p in first.output.glob("part-*"))
    run = second.run(entrypoint="crashing_jobs:running_sum", attempt=1,
                     args=job_args(second),
                     extra=["--restore", metadata_of(first, 2).as_uri()], timeout=120)
    assert run.returncode == ExitCode.RESTORE_FAILED, run.explain()
    assert "allowForeignJob" in run.output
    assert "Traceback" not in run.output
    assert sorted(p.name for p in first.output.glob("part-*")) == before


def test_with_the_opt_in_the_recreated_job_continues_exactly_once(
        jobs: tuple[JobHarness, JobHarness, Finished]) -> None:
    first, second, _ = jobs
    run = second.run(entrypoint="crashing_jobs:running_sum", attempt=2,
                     args=job_args(second),
                     extra=["--restore", metadata_of(first, 2).as_uri(),
                            "--allow-foreign-restore"])
    assert run.returncode == 0, run.explain()
    assert run.status is not None
    assert run.status["restoredFrom"]["id"] == 2
    assert run.status["restoredFrom"]["path"] == metadata_of(first, 2).as_uri()
    # Checkpoint ids go on from the restored one; the first job's checkpoints are
    # its own and are never pruned by the job that continued them.
    own = sorted(int(p.name.removeprefix("chk-"))
                 for p in (first.checkpoints / f"{second.name}-{second.uid}").glob("chk-*"))
    assert own and min(own) >= 3, own
    assert metadata_of(first, 2).exists() and metadata_of(first, 3).exists()
    assert second.running_sum_problems(count=COUNT) == []
