"""Logging a run of repeated failures once, not once per attempt.

The coordinator retries a failing trigger every interval and polls for manual
requests every few seconds; an apiserver that is down for an hour would
otherwise write the same warning thousands of times and bury the first one,
which is the one that says when the trouble began.
"""

from __future__ import annotations

import logging


class FailureStreak:
    """Warns on the first failure of a streak, notes later ones quietly, reports recovery."""

    def __init__(self, *, log: logging.Logger, what: str) -> None:
        self._log = log
        self._what = what
        self.failures = 0

    def failed(self, cause: str) -> None:
        self.failures += 1
        if self.failures == 1:
            self._log.warning("%s: %s (repeats are logged at debug level until it works again)",
                              self._what, cause)
        else:
            self._log.debug("%s (failure %d in a row): %s", self._what, self.failures, cause)

    def ended(self) -> None:
        if self.failures:
            self._log.info("%s: works again after %d failures in a row", self._what,
                           self.failures)
        self.failures = 0
