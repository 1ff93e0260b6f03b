"""A job whose function blocks forever, through the operator on a real API server.

The driver pod stays Running and every process is alive, but no checkpoint
completes. The stall watch ends the attempt (exit 13); the operator reads that exit
code as ``CheckpointStalled``, says so in the status and an Event, and starts the
next attempt from the latest checkpoint: the job finishes with every record once,
without anyone noticing it hung.
"""

from __future__ import annotations

import sys
from pathlib import Path

from operator_live import JobWatcher, Kubectl, OperatorProcess
from runtime_harness import JOBS

from cjob_spec.exit_codes import ExitCode
from e2e.controlplane.process_node import ProcessNode
from e2e.controlplane.rest import RestClient
from e2e.jobs import RUNNING_SUM_DIR, running_sum_job

sys.path.insert(0, str(RUNNING_SUM_DIR))
from verify import read_output, verify

COUNT = 6_000
RATE = 500


def test_a_job_whose_function_blocks_forever_is_restarted_as_stalled_with_nothing_lost(
    process_node: ProcessNode, kubectl: Kubectl, kube_rest: RestClient, kube_namespace: str,
    cjob_operator: OperatorProcess, tmp_path: Path,
) -> None:
    job = running_sum_job(name="hangs", namespace=kube_namespace, work_dir=tmp_path,
                          count=COUNT, rate=RATE)
    job["spec"]["job"]["entrypoint"] = "crashing_jobs:running_sum"
    job["spec"]["job"]["pythonPath"] = [str(JOBS)]
    job["spec"]["job"]["args"].update({"hang_at": 2_000,
                                       "hang_marker": str(tmp_path / "hung")})
    job["spec"]["health"] = {"checkpointStallIntervals": 6}
    watcher = JobWatcher(rest=kube_rest, namespace=kube_namespace, name="hangs",
                         operator=cjob_operator)
    assert kubectl.apply(job).returncode == 0

    finished = watcher.until(lambda s: s.get("phase") in ("Succeeded", "Failed"),
                             what="the job to finish", timeout=420)

    assert (tmp_path / "hung").exists(), "the map never reached the record where it blocks"
    assert finished["phase"] == "Succeeded", finished
    assert finished["restarts"] == 1, finished
    assert finished["lastFailure"]["reason"] == "CheckpointStalled", finished["lastFailure"]
    assert finished["lastFailure"]["exitCode"] == ExitCode.CHECKPOINT_STALLED
    assert "CheckpointStalled" in watcher.event_reasons()
    assert finished.get("restoredFrom") is not None, "the next attempt started empty"
    problems = verify(read_output(tmp_path / "output"), count=COUNT)
    assert problems == [], problems[:5]
