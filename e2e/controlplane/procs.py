"""Start and stop long-running component processes, each in its own process group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path


class ProcessExitedError(RuntimeError):
    """Raised when a component exits while we wait for it to become ready."""

    def __init__(self, *, name: str, returncode: int, log_file: Path) -> None:
        self.name = name
        self.returncode = returncode
        self.log_file = log_file
        super().__init__(
            f"{name} exited with code {returncode}; last log lines:\n{tail_file(log_file)}"
        )


def tail_file(path: Path, *, lines: int = 30) -> str:
    """The last ``lines`` lines of a text file, or a note that it is missing."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Component:
    """One child process with its log file.

    The process runs in a new session so that stopping it also stops anything it
    spawned, and so that a Ctrl-C in the terminal reaches only the test runner,
    which then tears components down in order.
    """

    def __init__(
        self, *, name: str, argv: list[str], log_file: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = argv
        self.log_file = log_file
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )

    def check_running(self) -> None:
        """Raise ``ProcessExitedError`` when the process has exited."""
        if self.process is None:
            return
        code = self.process.poll()
        if code is not None:
            raise ProcessExitedError(name=self.name, returncode=code, log_file=self.log_file)

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, *, timeout: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL it after ``timeout`` seconds."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
