"""What the harness's local servers (the Kafka broker, PostgreSQL) share: loopback ports,
process checks, log tails, and the small pieces of their ``up``/``down`` commands.

Each server keeps its own start and stop logic (a broker and a database stop
differently); only what is the same for both lives here.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

HOST = "127.0.0.1"


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    """Whether something accepts connections on the loopback ``port``."""
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (and is not a zombie awaiting its parent)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def tail_file(path: Path, *, lines: int = 30) -> str:
    """The last ``lines`` lines of a text file, or a note that it is missing."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:]) or "(the log is empty)"


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` whole: a reader never sees half a file."""
    scratch = path.with_name(f".{path.name}.tmp")
    scratch.write_text(text)
    os.replace(scratch, path)


def shown(path: Path) -> str:
    """``path`` relative to the current folder when it is inside it, as a user would type it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def say(line: str) -> None:
    """A progress line of a command, on standard error (standard output is its result)."""
    print(line, file=sys.stderr, flush=True)
