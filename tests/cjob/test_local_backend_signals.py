"""A signal that stops the runner while it starts a driver cannot orphan that driver.

The runner stops its drivers when Ctrl-C or SIGTERM reaches it, but only those it knows:
a signal that lands between the driver's process starting and the runner recording
it would leave a driver running that nobody supervises. The signal here is sent from
inside the start, right after the process exists, which is the moment the race needs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from operator_world import make_job

from cjob import local_backend
from cjob.local_backend import DriverLaunch, LocalBackend
from cjob_lifecycle.actions import CreateDriver

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def interruptible() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt, as in a terminal (a test worker may ignore it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_right_after_a_driver_process_starts_still_stops_that_driver(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interruptible: None) -> None:
    started: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen_then_interrupt(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        process = real_popen(*args, **kwargs)
        started.append(process)
        os.kill(os.getpid(), signal.SIGINT)
        return process

    monkeypatch.setattr(local_backend.subprocess, "Popen", popen_then_interrupt)

    def launch_for(action: CreateDriver) -> DriverLaunch:
        return DriverLaunch(argv=(sys.executable, "-c", "import time; time.sleep(120)"),
                            env=dict(os.environ), log=tmp_path / f"{action.name}.log")

    backend = LocalBackend(job=make_job(), store=tmp_path / "store", launch_for=launch_for,
                           on_event=lambda event: None, on_start=lambda action, log: None,
                           clock=lambda: NOW)
    try:
        with pytest.raises(KeyboardInterrupt):
            backend.execute([CreateDriver(name="demo-1", attempt=1, restore_pointer="",
                                          image="runtime")])
            # Without the signal reaching the runner at all, this test proves nothing.
            pytest.fail("the interrupt never reached the runner")
        backend.stop_all(timeout=10)
        (driver,) = started
        assert driver.poll() is not None, "the runner left the driver it started running"
        # Stopped by the runner's SIGTERM, not killed at the end of its patience: the
        # driver does not inherit anything that keeps it from being signalled.
        assert driver.returncode == -signal.SIGTERM
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
