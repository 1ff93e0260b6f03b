"""Restoring a checkpoint after the driver died: another parallelism, a damaged ``_metadata``.

One run with parallelism 2 is killed by a fault point while checkpoint 4 is
being committed (its state is written, its ``_metadata`` is not), which leaves
checkpoints 1-3 in the store. The tests then damage the newest one and restart
the driver as a supervisor would, against the same store and storage.
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
def killed(tmp_path_factory: pytest.TempPathFactory,
           new_harness: Callable[[Path], JobHarness]) -> tuple[JobHarness, Finished]:
    harness = new_harness(tmp_path_factory.mktemp("restore"))
    run = harness.run(entrypoint="crashing_jobs:running_sum", attempt=1,
                      args={"count": COUNT, "rate": RATE, "output": str(harness.output)},
                      env={"CJOB_FAULTS": "driver.before-metadata@4"})
    return harness, run


def job_args(harness: JobHarness) -> dict[str, Any]:
    return {"count": COUNT, "rate": RATE, "output": str(harness.output)}


def metadata_of(harness: JobHarness, checkpoint_id: int) -> Path:
    return harness.checkpoints / f"{harness.name}-{harness.uid}" / f"chk-{checkpoint_id}" / \
        "_metadata"


def test_the_fault_kills_the_driver_before_the_metadata_is_written(
        killed: tuple[JobHarness, Finished]) -> None:
    harness, run = killed
    assert run.returncode == -9, run.explain()
    assert metadata_of(harness, 3).exists()
    assert not metadata_of(harness, 4).exists()
    assert (harness.checkpoints / f"{harness.name}-{harness.uid}" / "chk-4").exists(), \
        "the subtasks' state of checkpoint 4 should be there"


def test_a_damaged_latest_metadata_fails_the_restore_with_exit_6(
        killed: tuple[JobHarness, Finished]) -> None:
    harness, _ = killed
    latest = metadata_of(harness, 3)
    data = bytearray(latest.read_bytes())
    data[-5] ^= 0xFF
    latest.write_bytes(bytes(data))

    run = harness.run(entrypoint="crashing_jobs:running_sum", attempt=2,
                      args=job_args(harness),
                      extra=["--restore", "latest", "--on-unreadable", "fail"], timeout=120)
    assert run.returncode == ExitCode.RESTORE_FAILED, run.explain()
    errors = [line for line in run.output.splitlines() if " ERROR " in line]
    assert len(errors) == 1, run.output
    assert "cannot restore from" in errors[0] and "chk-3/_metadata" in errors[0]
    assert "checksum" in errors[0]
    assert "Traceback" not in run.output


def test_fallback_restores_the_previous_checkpoint_with_another_parallelism(
        killed: tuple[JobHarness, Finished]) -> None:
    harness, _ = killed
    assert metadata_of(harness, 3).exists()  # still damaged from the test before
    run = harness.run(entrypoint="crashing_jobs:running_sum", attempt=3,
                      args=job_args(harness), parallelism=1,
                      extra=["--restore", "latest", "--on-unreadable", "fallback"])
    assert run.returncode == 0, run.explain()
    assert run.status is not None
    assert run.status["restoredFrom"]["id"] == 2
    assert any("checkpoint 3 is unreadable" in note for note in run.status["fallbackNotes"])
    assert "checkpoint 3 is unreadable" in run.output
    # Records that only checkpoint 3 had committed were committed again from 2:
    # the output must still hold each running sum exactly once.
    assert harness.running_sum_problems(count=COUNT) == []
