"""Fault injection at named points, to test recovery where it is hardest.

``CJOB_FAULTS`` lists ``point@checkpoint`` entries (comma-separated), e.g.
``driver.before-pointer@3``: when the driver reaches that point for checkpoint 3
it is killed with SIGKILL (its whole process group when it leads one, as a pod
dies). ``subtask.*`` points kill only the Python worker of the subtask, which
makes Spark relaunch the barrier stage. Each entry fires once: a marker file in
``CJOB_FAULTS_DIR`` (default: the system temp dir) remembers it across attempts.

Points: ``driver.before-metadata`` (all state written, no ``_metadata``),
``driver.before-pointer`` (``_metadata`` written, pointer not committed),
``driver.before-notify`` (pointer committed, sinks not told to commit),
``subtask.during-commit`` (a sink renamed part of its files),
``subtask.during-pre-commit`` (a sink's background pre-commit wrote part of its
staging file, the barrier already forwarded),
``subtask.write-ahead-after-send`` (the write-ahead sink sent an interval, its
committer has not recorded it), and
``subtask.after-snapshot`` (a task snapshotted and forwarded the barrier).
"""

from __future__ import annotations

import hashlib
import os
import signal
import tempfile


def _entries() -> list[tuple[str, int]]:
    spec = os.environ.get("CJOB_FAULTS", "")
    entries = []
    for item in spec.split(","):
        point, sep, checkpoint = item.strip().partition("@")
        if point and sep and checkpoint.isdigit():
            entries.append((point, int(checkpoint)))
    return entries


def _marker(point: str, checkpoint_id: int) -> str:
    directory = os.environ.get("CJOB_FAULTS_DIR") or tempfile.gettempdir()
    tag = hashlib.sha1(f"{os.environ.get('CJOB_FAULTS')}|{point}|{checkpoint_id}".encode()
                       ).hexdigest()[:16]
    return os.path.join(directory, f".cjob-fault-{tag}")


def maybe_fail(point: str, checkpoint_id: int) -> None:
    """Kill this process if ``point@checkpoint_id`` is armed and has not fired yet."""
    if "CJOB_FAULTS" not in os.environ:
        return
    if (point, checkpoint_id) not in _entries():
        return
    marker = _marker(point, checkpoint_id)
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    if point.startswith("driver.") and os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
