"""A job that is stuck is a failed job: it restarts by itself, on real Spark.

A ``map`` that blocks forever holds every barrier behind it: no checkpoint completes,
while every process is alive and the job would say Running until the checkpoint
timeout (ten minutes by default). The stall watch ends the attempt once the job has
gone ``spec.health.checkpointStallIntervals`` intervals without a checkpoint, and the
next attempt restores the latest one: the output stays exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runtime_harness import JOBS, EmbeddedRun, JobHarness, load_example, read_output

from cjob_spec.exit_codes import ExitCode

COUNT = 6000
RATE = 1000


def test_a_function_that_blocks_forever_restarts_the_job_as_stalled_and_nothing_is_lost(
        tmp_path: Path, embedded: Callable[..., EmbeddedRun],
        job_yaml: Callable[..., Path]) -> None:
    output = tmp_path / "output"
    marker = tmp_path / "hung"
    job = job_yaml(tmp_path / "job.yaml", name="hangs", entrypoint="crashing_jobs:running_sum",
                   python_path=[str(JOBS)],
                   args={"count": COUNT, "rate": RATE, "output": str(output),
                         "hang_at": 2500, "hang_marker": str(marker)},
                   health={"checkpointStallIntervals": 6})
    run = embedded(job, state_dir=tmp_path / "state", name="hangs", timeout=300)

    assert run.returncode == 0, run.explain()
    assert marker.exists(), "the map never reached the record where it blocks"
    status = run.status
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] == 1
    assert status["lastFailure"]["exitCode"] == ExitCode.CHECKPOINT_STALLED
    assert status["lastFailure"]["reason"] == "CheckpointStalled"
    assert "no checkpoint completed for" in run.attempt_log(1)
    verify = load_example("examples/running_sum/verify.py")
    assert verify.verify(read_output(output), count=COUNT) == []


def test_a_subtask_that_dies_on_every_relaunch_ends_the_attempt_as_a_restart_loop(
        harness: JobHarness) -> None:
    run = harness.run(entrypoint="crashing_jobs:running_sum", args={
        "count": COUNT, "rate": RATE, "output": str(harness.output), "crash_at": 300,
        "crash_always": True})
    assert run.returncode == ExitCode.RESTART_LOOP, run.explain()
    [line] = [line for line in run.output.splitlines() if "ERROR job_runtime.driver" in line]
    assert "the subtasks failed on every relaunch" in line and "restart loop" in line
    assert run.status is not None and run.status["subtaskRestarts"] >= 1
