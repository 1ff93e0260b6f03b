"""A job whose stateful operator was renamed, restored from a checkpoint of before the
rename, on real Spark: refused with one line naming the operator (exit code 10,
``IncompatibleState``) and nothing withdrawn; with ``allowNonRestoredState`` it runs,
the renamed operator starting empty, and the restore report lists what was dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_harness import Finished, JobHarness, error_lines

from cjob_checkpoint.store.file import FileCheckpointStore
from cjob_spec.exit_codes import ExitCode

COUNT = 8000
RATE = 1000


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory,
           new_harness: Callable[[Path], JobHarness]) -> tuple[JobHarness, Finished]:
    """The running sum, its reduce unnamed, killed before checkpoint 4's metadata."""
    harness = new_harness(tmp_path_factory.mktemp("renamed"))
    run = harness.run(entrypoint="crashing_jobs:running_sum", attempt=1, args=job_args(harness),
                      env={"CJOB_FAULTS": "driver.before-metadata@4"})
    return harness, run


def job_args(harness: JobHarness, **extra: Any) -> dict[str, Any]:
    return {"count": COUNT, "rate": RATE, "output": str(harness.output), **extra}


def part_files(harness: JobHarness) -> list[str]:
    return sorted(p.name for p in harness.output.glob("part-*"))


def test_a_renamed_operator_is_refused_by_name_in_one_line(
        killed: tuple[JobHarness, Finished]) -> None:
    harness, first = killed
    assert first.returncode == -9, first.explain()
    before = part_files(harness)
    run = harness.run(entrypoint="crashing_jobs:running_sum", attempt=2, timeout=120,
                      args=job_args(harness, reduce_name="total"),
                      extra=["--restore", "latest"])
    assert run.returncode == ExitCode.INCOMPATIBLE_STATE, run.explain()
    (line,) = error_lines(run.output)
    assert "holds state, but the job has no operator of that name" in line
    assert "its stateful operators: 'total'" in line
    assert "allowNonRestoredState" in line
    assert "Traceback" not in run.output
    assert part_files(harness) == before, "a refused restore withdrew output"


def test_with_allow_non_restored_state_it_runs_and_reports_what_it_dropped(
        killed: tuple[JobHarness, Finished]) -> None:
    harness, _ = killed
    run = harness.run(entrypoint="crashing_jobs:running_sum", attempt=3,
                      args=job_args(harness, reduce_name="total"),
                      extra=["--restore", "latest", "--allow-non-restored-state"])
    assert run.returncode == 0, run.explain()
    assert run.status is not None and run.status["restoredFrom"]["id"] == 3
    report = FileCheckpointStore(str(harness.store), retained=3, attempt=3).restore_report()
    assert report is not None and report.checkpoint is not None and report.checkpoint.id == 3
    (dropped,) = report.dropped
    assert "holds state, but the job has no operator of that name" in dropped
    # The renamed operator started empty: the sums after the restore restart from zero,
    # which is what the user allowed, and the verifier sees.
    assert harness.running_sum_problems(count=COUNT) != []
