"""The file-based examples run exactly once through a driver kill, as the README shows:
each through ``cjob run --kill-driver-after``, its verifier run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_harness import REPO, EmbeddedRun, runtime_env

EXAMPLES = REPO / "examples"


CLICKS = EXAMPLES / "clicks_per_minute" / "data"


@pytest.mark.parametrize(("example", "entrypoint", "args", "verdict", "checks"), [
    ("word_count", "job:build", {"delay_ms": 200}, "verdict: output exactly-once", []),
    ("clicks_per_minute", "job:build", {"delay_ms": 3}, "output exactly-once", []),
    ("sessions", "job:build", {"delay_ms": 3}, "output exactly-once", []),
    ("sessions", "job:build_with_timers", {"delay_ms": 3}, "output exactly-once",
     ["--numbered"]),
], ids=["word counts", "event-time windows", "session windows", "sessions by timers"])
def test_an_example_is_exactly_once_across_a_driver_kill(
        tmp_path: Path, embedded: Callable[..., EmbeddedRun], job_yaml: Callable[..., Path],
        example: str, entrypoint: str, args: dict[str, Any], verdict: str,
        checks: list[str]) -> None:
    directory = EXAMPLES / example
    data = directory / "data" if (directory / "data").is_dir() else CLICKS
    output = tmp_path / "output"
    job = job_yaml(tmp_path / f"{example}.yaml", name=example.replace("_", "-"),
                   entrypoint=entrypoint, python_path=[str(directory)],
                   args={"input": str(data), "output": str(output), **args})
    run = embedded(job, state_dir=tmp_path / "state", name=example.replace("_", "-"),
                   extra=["--kill-driver-after", "1"])

    assert run.returncode == 0, run.explain()
    assert "killing the driver of attempt 1" in run.output
    status = run.status
    assert status["phase"] == "Succeeded"
    assert status["restarts"] == 1
    assert status["restoredFrom"] is not None and status["restoredFrom"]["id"] >= 1

    checked = subprocess.run(
        [sys.executable, str(directory / "verify.py"), "--input", str(data),
         "--output", str(output), *checks],
        capture_output=True, text=True, env=runtime_env(), timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert verdict in checked.stdout


def test_the_orders_payments_join_fills_its_delta_table_once_across_a_driver_kill(
        tmp_path: Path, embedded: Callable[..., EmbeddedRun],
        job_yaml: Callable[..., Path]) -> None:
    directory = EXAMPLES / "orders_payments"
    data = tmp_path / "input"
    made = subprocess.run([sys.executable, str(directory / "data.py"), "--out", str(data),
                           "--orders", "1200"],
                          capture_output=True, text=True, env=runtime_env(), timeout=120)
    assert made.returncode == 0, made.stderr
    table = tmp_path / "paid-orders"
    job = job_yaml(tmp_path / "paid-orders.yaml", name="paid-orders", entrypoint="job:build",
                   python_path=[str(directory)],
                   args={"orders": str(data / "orders"), "payments": str(data / "payments"),
                         "output": str(table), "late": str(tmp_path / "late"),
                         "delay_ms": 3})
    run = embedded(job, state_dir=tmp_path / "state", name="paid-orders",
                   extra=["--kill-driver-after", "1"])
    assert run.returncode == 0, run.explain()
    assert "killing the driver of attempt 1" in run.output
    assert run.status["phase"] == "Succeeded" and run.status["restarts"] == 1

    checked = subprocess.run(
        [sys.executable, str(directory / "verify.py"), "--input", str(data),
         "--output", str(table)],
        capture_output=True, text=True, env=runtime_env(), timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "output exactly-once" in checked.stdout
