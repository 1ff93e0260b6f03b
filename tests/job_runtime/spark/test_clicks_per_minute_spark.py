"""The clicks-per-minute example counts per user and minute of event time exactly once
through a driver kill (as the README shows), its verifier run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from runtime_harness import REPO, EmbeddedRun, runtime_env

EXAMPLE = REPO / "examples" / "clicks_per_minute"


def test_clicks_per_minute_are_exactly_once_across_a_driver_kill(
        tmp_path: Path, embedded: Callable[..., EmbeddedRun],
        job_yaml: Callable[..., Path]) -> None:
    output = tmp_path / "output"
    job = job_yaml(tmp_path / "clicks-per-minute.yaml", name="clicks-per-minute",
                   entrypoint="job:build", python_path=[str(EXAMPLE)],
                   args={"input": str(EXAMPLE / "data"), "output": str(output),
                         "delay_ms": 3})
    run = embedded(job, state_dir=tmp_path / "state", name="clicks-per-minute",
                   extra=["--kill-driver-after", "1"])

    assert run.returncode == 0, run.explain()
    assert "killing the driver of attempt 1" in run.output
    status = run.status
    assert status["phase"] == "Succeeded"
    assert status["restarts"] == 1
    assert status["restoredFrom"] is not None

    verdict = subprocess.run(
        [sys.executable, str(EXAMPLE / "verify.py"), "--input", str(EXAMPLE / "data"),
         "--output", str(output)],
        capture_output=True, text=True, env=runtime_env(), timeout=120)
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    assert "output exactly-once" in verdict.stdout
