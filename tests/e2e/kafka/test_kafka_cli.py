"""``python -m e2e.kafka up`` / ``down`` as a user runs them: ``up`` leaves a broker running
after it returns and ends with the ``KAFKA_BOOTSTRAP=`` line, a second ``up`` is
harmless, ``down`` stops the broker; mistakes get one line saying what to do.

Each test has a state folder of its own, so a broker a developer runs from the
checkout is left alone.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from paths import REPO as REPO_ROOT

from e2e.kafka import create_topic
from e2e.local_service import port_open


def _cli(
    command: str, *, state_dir: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "e2e.kafka", command, "--state-dir", str(state_dir)],
        cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=180, check=False,
    )  # fmt: skip


def _kill_leftover(state_dir: Path) -> None:
    """If a failed assertion left a broker running, stop it the hard way."""
    if _cli("down", state_dir=state_dir).returncode == 0:
        return
    try:
        os.killpg(int((state_dir / "kafka.pid").read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def test_up_prints_the_bootstrap_line_a_second_up_is_harmless_and_down_stops_the_broker(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "kafka"
    try:
        first = _cli("up", state_dir=state_dir)
        assert first.returncode == 0, first.stderr
        line = first.stdout.splitlines()[-1]
        assert re.fullmatch(r"KAFKA_BOOTSTRAP=127\.0\.0\.1:\d+", line), first.stdout
        assert (state_dir / "env").read_text() == f"{line}\n"
        bootstrap = line.removeprefix("KAFKA_BOOTSTRAP=")
        # The broker outlived the command that started it, and serves.
        create_topic(bootstrap=bootstrap, partitions=3)

        second = _cli("up", state_dir=state_dir)
        assert second.returncode == 0, second.stderr
        assert second.stdout.splitlines()[-1] == line
        assert "already runs" in second.stderr

        stopped = _cli("down", state_dir=state_dir)
        assert stopped.returncode == 0, stopped.stderr
        assert not port_open(int(bootstrap.rsplit(":", 1)[1]))
        assert not (state_dir / "env").exists()
        assert "Traceback" not in first.stderr + second.stderr + stopped.stderr
    finally:
        _kill_leftover(state_dir)


def test_down_with_no_broker_running_says_so_and_succeeds(tmp_path: Path) -> None:
    result = _cli("down", state_dir=tmp_path / "kafka")

    assert result.returncode == 0
    assert result.stderr.strip() == "no Kafka broker running"


def test_up_without_java_says_in_one_line_what_to_install(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty)}

    result = _cli("up", state_dir=tmp_path / "kafka", env=env)

    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: `java` not found"), result.stderr
    assert "openjdk-17-jre-headless" in result.stderr
    assert result.stdout == ""
