"""A warm standby driver takes over a killed driver's job, on real Spark, exactly once.

The job is the running-sum example's (see test_recovery_spark.py): sorted, every
key's sums must step by exactly its inputs, so a record lost or processed twice
across the takeover shows in the output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from runtime_harness import (
    JOBS,
    REPO,
    EmbeddedRun,
    load_example,
    read_output,
    reap,
    runtime_env,
    wait_for,
    write_job_yaml,
)

COUNT = 8000
RATE = 100
"""Records per second overall: the job runs for about 80 s, long enough for the standby
to start its Spark (it shares the machine with the active driver) before the kill."""


def _progress(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


def test_a_killed_driver_is_taken_over_by_its_standby_and_the_output_stays_exactly_once(
        tmp_path: Path) -> None:
    output = tmp_path / "output"
    job = write_job_yaml(tmp_path / "job.yaml", name="takeover",
                         entrypoint="crashing_jobs:running_sum", python_path=[str(JOBS)],
                         args={"count": COUNT, "rate": RATE, "output": str(output)})
    document = yaml.safe_load(job.read_text())
    document["spec"]["standby"] = {"enabled": True}
    document["spec"]["restartPolicy"]["backoff"] = {"initial": "0s", "max": "1s"}
    job.write_text(yaml.safe_dump(document, sort_keys=False))
    state = tmp_path / "state"
    job_dir = state / "takeover"
    log = tmp_path / "runner.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cjob", "run", str(job), "--state-dir", str(state),
             "--fresh"], stdout=out, stderr=subprocess.STDOUT, env=runtime_env(None),
            cwd=REPO, start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            first: dict[str, Any] | None = None
            while time.monotonic() < deadline and proc.poll() is None:
                first = _progress(job_dir / "attempt-1.progress.json")
                ready = (job_dir / "takeover-standby-1.promote.ready").exists()
                if ready and first and first["checkpoints"]["completed"] >= 1:
                    break
                time.sleep(0.1)
            assert proc.poll() is None, f"the job ended before the standby was ready:\n" \
                                        f"{log.read_text(errors='replace')[-3000:]}"
            assert first is not None and (job_dir / "takeover-standby-1.promote.ready").exists()
            os.killpg(int(first["pid"]), signal.SIGKILL)
            returncode = wait_for(proc, timeout=600, log=log)
        finally:
            reap(proc.pid)
    run = EmbeddedRun(returncode=returncode, output=log.read_text(errors="replace"),
                      state_dir=state, name="takeover")

    assert returncode == 0, run.explain()
    status = run.status
    assert status["phase"] == "Succeeded", status
    assert (status["attempt"], status["restarts"]) == (2, 1)
    assert status["driverPod"] == "takeover-standby-1", "attempt 2 was not the standby"
    assert "promoted standby takeover-standby-1" in run.output
    assert status["restoredFrom"] is not None
    taken_over = run.attempt_progress(2)
    assert taken_over["restoredFrom"] is not None
    # The standby's barrier stage was launched (and parked) before it was promoted.
    assert taken_over["timeline"]["stageLaunchedAt"] < taken_over["timeline"]["promotedAt"]
    verify = load_example("examples/running_sum/verify.py")
    assert verify.verify(read_output(output), count=COUNT) == []
