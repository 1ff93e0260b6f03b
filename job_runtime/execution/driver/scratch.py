"""The driver's scratch folder for job code, and the folders of dead drivers.

The driver downloads and zips the job's code into a folder of its own in the
temporary directory and removes it at exit. A driver that is killed (SIGKILL, an
OOM kill, a lost node) never runs its exit hooks, so on a host that runs drivers
as processes the folders pile up. The folder's name carries the driver's pid, and
each driver removes, before it makes its own, the folders whose driver is gone.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

PREFIX = "cjob-code-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphans(*, parent: Path, prefix: str = PREFIX) -> list[Path]:
    """Remove the folders under ``parent`` named ``<prefix><pid>-...`` whose process is gone.

    Folders of a live process (or of a pid now reused, which cannot be told apart)
    are kept: leaving a folder is harmless, removing a live process's is not. The
    benchmarks name their scratch folders the same way and clear them with this.
    """
    name = re.compile(rf"^{re.escape(prefix)}(\d+)-[A-Za-z0-9_.-]+$")
    removed: list[Path] = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = name.match(entry.name)
        if match is None or not entry.is_dir() or entry.is_symlink():
            continue
        if _alive(int(match.group(1))):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def new_code_dir() -> str:
    """A fresh code folder named after this process, once dead drivers' are gone."""
    parent = Path(tempfile.gettempdir())
    remove_orphans(parent=parent)
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent)
