"""The word-count example runs exactly once through a driver kill (as the README shows)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from runtime_harness import REPO, EmbeddedRun, runtime_env

EXAMPLE = REPO / "examples" / "word_count"


def test_word_counts_over_text_files_are_exactly_once_across_a_driver_kill(
        tmp_path: Path, embedded: Callable[..., EmbeddedRun],
        job_yaml: Callable[..., Path]) -> None:
    output = tmp_path / "output"
    job = job_yaml(tmp_path / "word-count.yaml", name="word-count", entrypoint="job:build",
                   python_path=[str(EXAMPLE)],
                   args={"input": str(EXAMPLE / "data"), "output": str(output),
                         "delay_ms": 200})
    run = embedded(job, state_dir=tmp_path / "state", name="word-count",
                   extra=["--kill-driver-after", "1"])

    assert run.returncode == 0, run.explain()
    assert "killing the driver of attempt 1" in run.output
    status = run.status
    assert status["phase"] == "Succeeded"
    assert status["restarts"] == 1
    assert status["restoredFrom"] is not None and status["restoredFrom"]["id"] >= 1

    verdict = subprocess.run(
        [sys.executable, str(EXAMPLE / "verify.py"), "--input", str(EXAMPLE / "data"),
         "--output", str(output)],
        capture_output=True, text=True, env=runtime_env(), timeout=120)
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    assert "verdict: output exactly-once" in verdict.stdout
