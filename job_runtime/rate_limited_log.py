"""A log line per stretch of time, not per event: for what a flood may repeat.

Listeners reachable from the cluster count the connections they reject or drop, and
say so at most once an interval, with the count: a flood of connections must not
become a flood of the log.
"""

from __future__ import annotations

import logging
import threading
import time

LOG_INTERVAL_SECONDS = 60.0
"""Shortest time between two log lines about connections a listener dropped: a flood of
connections must not become a flood of the log."""


class RateLimitedLog:
    """Counts events and logs them at most once per ``interval`` seconds, with the count.

    The first event is logged at once (it may be the only one); later ones are summed
    into the next line, written when an event comes after the interval.
    """

    def __init__(self, *, logger: logging.Logger, what: str,
                 interval: float = LOG_INTERVAL_SECONDS) -> None:
        self._logger = logger
        self._what = what
        self._interval = interval
        self._lock = threading.Lock()
        self._unlogged = 0
        self._last_line: float | None = None
        self.total = 0

    def event(self, detail: str) -> None:
        """One more event; ``detail`` (of this one) is named if a line is written now."""
        now = time.monotonic()
        with self._lock:
            self.total += 1
            self._unlogged += 1
            if self._last_line is not None and now - self._last_line < self._interval:
                return
            count, self._unlogged, self._last_line = self._unlogged, 0, now
        self._logger.warning("%s (%d since the last report, %d in all); the latest: %s",
                             self._what, count, self.total, detail)
