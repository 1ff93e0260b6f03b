"""A driver that is a container's first process still dies of SIGTERM.

The kernel drops a default-action signal sent to a PID namespace's first process, so
a driver pod's ``python -m job_runtime`` (its container's command) would wait out the
whole grace period of every deletion. These tests run the driver's signal set-up as
PID 1 of a new PID namespace, as the container runtime does."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import REPO

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a new PID namespace needs root and unshare",
)

WITH_HANDLER = (
    "from job_runtime.cli import exit_on_sigterm; exit_on_sigterm(); "
    "import time; print('ready', flush=True); time.sleep(60)"
)
WITHOUT_HANDLER = "import time; print('ready', flush=True); time.sleep(60)"


def _run_as_pid_one(code: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--", sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    (child,) = children
    status = Path(f"/proc/{child}/status").read_text()
    ns_pids = next(line for line in status.splitlines() if line.startswith("NSpid:"))
    assert ns_pids.split()[-1] == "1", "the program must be its namespace's first process"
    return proc, int(child)


def test_a_driver_that_is_pid_one_exits_with_143_on_sigterm() -> None:
    proc, child = _run_as_pid_one(WITH_HANDLER)
    os.kill(child, signal.SIGTERM)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM


def test_without_the_handler_pid_one_ignores_sigterm() -> None:
    # The reason for the handler: the same program without it survives SIGTERM.
    proc, child = _run_as_pid_one(WITHOUT_HANDLER)
    os.kill(child, signal.SIGTERM)
    time.sleep(1.0)
    try:
        assert proc.poll() is None
    finally:
        os.kill(child, signal.SIGKILL)
        proc.wait(timeout=20)
