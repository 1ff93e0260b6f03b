"""A driver removes the code folders that killed drivers left, and only those."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from job_runtime.execution.driver.scratch import PREFIX, remove_orphans


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return proc.pid


def test_the_folders_of_dead_drivers_are_removed_and_the_others_kept(tmp_path: Path) -> None:
    dead = tmp_path / f"{PREFIX}{_dead_pid()}-abc123"
    live = tmp_path / f"{PREFIX}{os.getpid()}-def456"
    unnamed = tmp_path / f"{PREFIX}xyz"  # an older runtime's folder: no pid to judge by
    other = tmp_path / "something-else-1-a"
    for folder in (dead, live, unnamed, other):
        (folder / "job").mkdir(parents=True)
        (folder / "job" / "code.py").write_text("x = 1\n")

    assert remove_orphans(parent=tmp_path) == [dead]

    assert not dead.exists()
    assert live.exists() and unnamed.exists() and other.exists()


def test_a_link_named_like_a_dead_drivers_folder_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "kept"
    target.mkdir()
    (target / "file").write_text("keep")
    link = tmp_path / f"{PREFIX}{_dead_pid()}-abc123"
    link.symlink_to(target)

    assert remove_orphans(parent=tmp_path) == []

    assert (target / "file").read_text() == "keep"
