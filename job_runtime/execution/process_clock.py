"""When this process started, for timelines that begin before any of our code ran.

The driver's timeline starts with its process (imports included), and a subtask's
launch log with its Python worker's fork: both read it from ``/proc``.
"""

from __future__ import annotations

import os
import time


def process_started_at() -> float:
    """When this process started (wall clock), from ``/proc``; now where that is unknown."""
    try:
        with open("/proc/self/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        return time.time() - (uptime - started)
    except (OSError, ValueError, IndexError):
        return time.time()
