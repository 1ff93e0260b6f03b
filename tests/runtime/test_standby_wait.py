"""A standby driver's wait: promoted by a typed file, never by a guess, never orphaned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from runtime_harness import REPO, runtime_env

from cjob_spec.standby_signal import (
    StandbyPromotion,
    StandbyReady,
    StandbySignalError,
    read_ready,
    ready_path,
    write_signal,
)
from job_runtime.errors import ConfigurationError
from job_runtime.execution.standby import wait_for_promotion


def test_the_standby_takes_the_attempt_and_restore_point_its_promotion_names(
        tmp_path: Path) -> None:
    path = tmp_path / "standby.promote"
    promotion = StandbyPromotion(attempt=4, restore="latest", status_file="/s/a-4.json")
    writer = threading.Timer(0.2, write_signal, args=(path, promotion))
    writer.start()
    try:
        assert wait_for_promotion(str(path), rewarm=lambda: None) == promotion
    finally:
        writer.cancel()


def test_a_promotion_of_an_unknown_format_version_is_refused_with_a_sentence(
        tmp_path: Path) -> None:
    path = tmp_path / "standby.promote"
    path.write_text(json.dumps({"version": 2, "attempt": 4, "restore": "latest"}))
    with pytest.raises(ConfigurationError, match="format version 2"):
        wait_for_promotion(str(path), rewarm=lambda: None)


@pytest.mark.parametrize("body", [{"version": 1, "attempt": 0, "restore": "latest"},
                                  {"version": 1, "attempt": "2", "restore": "latest"},
                                  {"version": 1, "attempt": 2, "restore": ""}])
def test_a_promotion_without_a_usable_attempt_or_restore_point_is_refused(
        tmp_path: Path, body: dict[str, object]) -> None:
    path = tmp_path / "standby.promote"
    path.write_text(json.dumps(body))
    with pytest.raises(ConfigurationError, match="--standby"):
        wait_for_promotion(str(path), rewarm=lambda: None)


def test_readiness_round_trips_and_half_written_files_are_never_read(tmp_path: Path) -> None:
    promotion = tmp_path / "standby.promote"
    assert read_ready(ready_path(promotion)) is None
    write_signal(ready_path(promotion), StandbyReady(pid=7, ready_at=1.5))
    assert read_ready(ready_path(promotion)) == StandbyReady(pid=7, ready_at=1.5)
    assert [p.name for p in tmp_path.iterdir()] == ["standby.promote.ready"]
    ready_path(promotion).write_text("{")
    with pytest.raises(StandbySignalError, match="not valid JSON"):
        read_ready(ready_path(promotion))


def test_a_standby_whose_supervisor_is_gone_exits_instead_of_waiting_forever(
        tmp_path: Path) -> None:
    pid_file = tmp_path / "waiter.pid"
    waiter = textwrap.dedent(f"""\
        import os
        from job_runtime.execution.standby import wait_for_promotion
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        wait_for_promotion({str(tmp_path / "never.promote")!r}, rewarm=lambda: None)
        """)
    # The supervisor starts the waiter and dies at once, leaving it orphaned.
    supervisor = textwrap.dedent(f"""\
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {waiter!r}])
        while not __import__("os").path.exists({str(pid_file)!r}):
            time.sleep(0.01)
        """)
    subprocess.run([sys.executable, "-c", supervisor], cwd=REPO, env=runtime_env(None),
                   check=True, timeout=60)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid), "the orphaned standby kept waiting"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
