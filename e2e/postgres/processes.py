"""The server's processes seen from outside: alive or not, all of them, their stop.

The postmaster starts in a session of its own, but every process it forks (backends,
the checkpointer, the WAL writer...) calls ``setsid()`` and leads a process group of
its own, so that the postmaster can signal it with whatever it started in turn. The
server is therefore the postmaster's group, its children, and their groups: a stop is
done when none of those is left, not merely when the postmaster has gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

KILL_WAIT = 5.0


def stop_server(pid: int, *, grace: float, is_alive: Callable[[], bool] | None = None) -> None:
    """Fast shutdown of postmaster ``pid``; SIGKILL to all of its processes after ``grace`` s.

    SIGINT goes to the postmaster alone: it is PostgreSQL's fast shutdown (roll back open
    transactions, close the connections, write a checkpoint), and the postmaster stops
    and reaps its own children before it exits; SIGTERM would wait for every client to
    disconnect. ``grace=0`` kills at once, a crash. Returns once no process of the
    server is left (or after five more seconds), so the port and the socket are free.
    """
    alive = is_alive or (lambda: pid_alive(pid))
    if grace > 0 and alive():
        _signal(pid, signal.SIGINT)
        deadline = time.monotonic() + grace
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    doomed = kill_server(pid) if alive() else []
    deadline = time.monotonic() + KILL_WAIT
    while (alive() or any(pid_alive(each) for each in doomed)) and time.monotonic() < deadline:
        time.sleep(0.05)


def kill_server(pid: int) -> list[int]:
    """SIGKILL postmaster ``pid`` and every process of its server; returns their pids.

    The postmaster is stopped first, so that it forks nothing while its processes are
    listed, and killed last, so that its children are still its own while they are
    found (an orphan's parent is init).
    """
    _signal(pid, signal.SIGSTOP)
    doomed = server_processes(pid)
    for leader in (*children_of(pid), pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, signal.SIGKILL)
    for each in doomed:
        _signal(each, signal.SIGKILL)
    return doomed


def remove_leftover_shared_memory(data_dir: Path) -> None:
    """Remove the System V segment a killed server leaves behind, once nothing uses it.

    A server that shuts down removes its small interlock segment and its
    ``postmaster.pid``; a killed one leaves both, and the segment would outlive the
    cluster's folder. The pid file's seventh line holds the segment's key and id.
    """
    try:
        shmid = int((data_dir / "postmaster.pid").read_text().splitlines()[6].split()[1])
    except (OSError, IndexError, ValueError):
        return
    ipcrm = shutil.which("ipcrm")
    if ipcrm is not None and _attachments(shmid) == 0:
        subprocess.run([ipcrm, "-m", str(shmid)], stdin=subprocess.DEVNULL,
                       capture_output=True, check=False)  # fmt: skip


def server_processes(pid: int) -> list[int]:
    """The live processes of the server whose postmaster is ``pid``, the postmaster first.

    Those are its children and every process in its group or in a child's group.
    """
    table = _process_table()
    children = {each for each, (_, ppid, _) in table.items() if ppid == pid}
    groups = {pid, *children}
    found = {each for each, (_, _, pgid) in table.items() if pgid in groups} | children
    found.discard(pid)
    return ([pid] if pid in table else []) + sorted(found)


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    return sorted(each for each, (_, ppid, _) in _process_table().items() if ppid == pid)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (and is not a zombie awaiting its parent)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"





def _attachments(shmid: int) -> int | None:
    """How many processes attach System V segment ``shmid``; None when there is none."""
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return None
    for row in rows:
        # key shmid perms size cpid lpid nattch ...
        fields = row.split()
        if len(fields) > 6 and fields[1] == str(shmid):
            return int(fields[6])
    return None


def _process_table() -> dict[int, tuple[str, int, int]]:
    """Every live (not zombie) process: pid -> (state, parent pid, process group)."""
    table: dict[int, tuple[str, int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        # After the command's closing parenthesis: state, ppid, pgrp.
        if fields is not None and fields[0] != "Z":
            table[int(entry.name)] = (fields[0], int(fields[1]), int(fields[2]))
    return table


def _stat_fields(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
