"""Stopping ``cjob run`` stops its drivers.

The drivers run in process groups of their own (as pods would), so a runner that
simply dies leaves them running: a job nobody supervises, still writing output and
holding the state directory's store. Ctrl-C and SIGTERM (a service manager, a CI
timeout, ``kill``) must both stop them before the runner exits.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from paths import SUPPORT

STUB = SUPPORT / "stub_driver.py"
# As from a terminal: SIGINT raises KeyboardInterrupt. A process started by one that
# ignores SIGINT (a test runner's worker, a shell's background job) inherits the
# ignoring, and Python then installs no handler of its own.
LAUNCHER = textwrap.dedent(f"""\
    import signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import cjob.cli
    from cjob.embedded import RunOptions

    def with_stub(**options):
        return RunOptions(**options, driver_command=(sys.executable, {str(STUB)!r}))

    cjob.cli.RunOptions = with_stub
    sys.exit(cjob.cli.main(sys.argv[1:]))
    """)


def write_job(tmp_path: Path) -> Path:
    """A one-driver job file for the stub driver."""
    job = tmp_path / "job.yaml"
    job.write_text(textwrap.dedent("""\
        apiVersion: checkpointed.io/v1alpha1
        kind: CheckpointedJob
        metadata: {name: demo, uid: uid-1}
        spec:
          job: {entrypoint: "job:build"}
          parallelism: 1
          spark: {master: "local[1]"}
          checkpoint: {storage: "file:///unused", interval: 1s}
        """))
    return job


def start_runner(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    job = write_job(tmp_path)
    state = tmp_path / "state"
    env = {**os.environ, "STUB_SECONDS": "120", "STUB_EXITS": "0"}
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, "run", str(job), "--state-dir",
                             str(state), "--fresh"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    return proc, state


def driver_pids(state: Path) -> list[int]:
    """The stub drivers of this test's job (their command line names its store)."""
    found = subprocess.run(["pgrep", "-f", f"stub_driver.py .*{state}"], capture_output=True,
                           text=True, check=False).stdout.split()
    return [int(pid) for pid in found]


def wait_until(condition: object, *, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting until {what}")


@pytest.mark.parametrize(("signal_", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signalled_runner_stops_its_driver_before_it_exits(
        tmp_path: Path, signal_: signal.Signals, exit_code: int) -> None:
    proc, state = start_runner(tmp_path)
    try:
        wait_until(lambda: driver_pids(state), what="the driver runs")
        proc.send_signal(signal_)
        output, _ = proc.communicate(timeout=60)
    finally:
        for pid in driver_pids(state):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == exit_code, output
    assert driver_pids(state) == [], "the runner left its driver running"
    assert "run the same command again to resume" in output
    status = json.loads((state / "demo" / "status.json").read_text())
    assert status["phase"] in ("Pending", "Running")   # resumable, not reported as failed


def test_an_interrupt_right_after_the_driver_started_still_records_a_resumable_status(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The signal can land between launching the driver and writing status.json: the
    # pass's status must be written all the same, and the driver stopped.
    from cjob.embedded import EmbeddedRunner, RunOptions
    from cjob_spec import load_job_file

    monkeypatch.setenv("STUB_SECONDS", "120")
    monkeypatch.setenv("STUB_EXITS", "0")
    job = write_job(tmp_path)
    state = tmp_path / "state"
    runner = EmbeddedRunner(
        job=load_job_file(str(job)),
        options=RunOptions(state_dir=str(state), fresh=True, out=io.StringIO(),
                           base_dir=str(tmp_path), driver_command=(sys.executable, str(STUB))))

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "_print_events", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.run()

    assert driver_pids(state) == [], "the runner left its driver running"
    status = json.loads((state / "demo" / "status.json").read_text())
    assert status["phase"] in ("Pending", "Running")
    assert status["attempt"] == 1
