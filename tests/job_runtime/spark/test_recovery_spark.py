"""Exactly-once output across crashes, on real Spark in local mode.

The job is the running-sum example's: every key's running sum after each
record. Sorted, a key's sums must step by exactly its inputs, each once, so a
lost or a duplicated record shows in the output (see examples/running_sum/verify.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from runtime_harness import JOBS, EmbeddedRun, JobHarness, load_example, read_output

COUNT = 8000
RATE = 1000  # records per second overall: the job runs for about 8 s


def test_a_killed_subtask_process_is_relaunched_and_the_output_stays_exactly_once(
        harness: JobHarness) -> None:
    marker = harness.base / "crashed"
    run = harness.run(entrypoint="crashing_jobs:running_sum", args={
        "count": COUNT, "rate": RATE, "output": str(harness.output),
        "crash_at": 2500, "crash_marker": str(marker)})

    assert run.returncode == 0, run.explain()
    assert marker.exists(), "the subtask never reached the record that kills it"
    assert run.status is not None
    assert run.status["state"] == "finished"
    assert run.status["subtaskRestarts"] >= 1, "Spark did not relaunch the barrier stage"
    # The relaunched subtasks restored a checkpoint taken before the crash.
    assert run.status["restoredFrom"] is not None
    assert run.status["checkpoints"]["completed"] >= 2
    assert harness.running_sum_problems(count=COUNT) == []


def test_driver_kills_at_every_commit_step_keep_the_output_exactly_once(
        tmp_path: Path, embedded: Callable[..., EmbeddedRun],
        job_yaml: Callable[..., Path]) -> None:
    """One run, three driver kills and one subtask kill, each at a named fault point.

    * ``subtask.during-commit@2``: a sink dies after renaming part of its files;
      Spark relaunches the stage, which commits the rest on restore.
    * ``driver.before-pointer@4``: ``_metadata`` of 4 is written but the store
      never recorded it, so the next attempt must restore 3, not 4.
    * ``driver.before-notify@6``: 6 is recorded but no sink was told to commit;
      the next attempt restores 6 and commits its pending files.
    """
    output = tmp_path / "output"
    job = job_yaml(tmp_path / "job.yaml", name="faults", entrypoint="crashing_jobs:running_sum",
                   python_path=[str(JOBS)],
                   args={"count": COUNT, "rate": RATE, "output": str(output)})
    faults = "subtask.during-commit@2,driver.before-pointer@4,driver.before-notify@6"
    run = embedded(job, state_dir=tmp_path / "state", name="faults",
                   env={"CJOB_FAULTS": faults, "CJOB_FAULTS_DIR": str(tmp_path)})

    assert run.returncode == 0, run.explain()
    status = run.status
    assert status["phase"] == "Succeeded", status
    assert status["attempt"] == 3
    assert status["restarts"] == 2
    assert status["lastFailure"]["exitCode"] == 137
    assert status["restoredFrom"]["id"] == 6
    assert status["restoredFrom"]["path"].endswith("/chk-6/_metadata")

    assert len(list(tmp_path.glob(".cjob-fault-*"))) == 3, "not every fault point fired"
    # The subtask kill made Spark relaunch the stage within attempt 1. (Its
    # progress file, written once a second, may predate the relaunch: use the log.)
    assert "subtasks restarted (stage attempt" in run.attempt_log(1)
    # Attempt 2 restores the newest checkpoint attempt 1 completed (ids depend on
    # which triggers the relaunch aborted), never 4, whose pointer was not committed.
    completed_in_first = completed_ids(run.attempt_log(1))
    assert completed_in_first and max(completed_in_first) < 4
    assert run.attempt_progress(2)["restoredFrom"]["id"] == max(completed_in_first)
    # Attempt 3 restores 6: its pointer was committed before the driver died.
    assert run.attempt_progress(3)["restoredFrom"]["id"] == 6

    verify = load_example("examples/running_sum/verify.py")
    assert verify.verify(read_output(output), count=COUNT) == []


def completed_ids(log: str) -> list[int]:
    return [int(m) for m in re.findall(r"checkpoint (\d+) completed", log)]

