"""State time-to-live: values that expire, so state keyed by user id does not grow forever.

``ctx.value_state("last_seen", ttl="1h")`` keeps each key's value for an hour of
processing time after it was last written (as Flink's ``OnCreateAndWrite`` and
Spark's ``TTLConfig``); ``map_state(name, ttl=...)`` does so per map entry. The
expiry time is stored with the value (:class:`Expiring`), so it survives a restore,
at any parallelism, with either backend; the TTL itself is the job's code, not the
checkpoint's: a changed TTL applies to values written from then on.

An expired value is never returned: a read that finds one removes it. Values nobody
reads again are removed by :class:`TtlSweeper`, which the operator runs now and then
on the task thread: one key group per run, in turn, so a sweep never stops the task
for long and every group is visited within ``key groups x interval``. Both backends
are swept the same way (on ``rocksdb`` a compaction filter would need native code).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from job_runtime.state.backend import KeyedStateBackend

Clock = Callable[[], int]
"""Processing time in milliseconds since the epoch."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class Expiring:
    """A value with the processing time (ms) from which it is gone."""

    value: Any
    expires_at: int


def live(stored: Any, now: int) -> bool:
    """Whether ``stored`` (a value, or an :class:`Expiring` one) is still there at ``now``."""
    return not isinstance(stored, Expiring) or stored.expires_at > now


def unwrap(stored: Any) -> Any:
    return stored.value if isinstance(stored, Expiring) else stored


class TtlSweeper:
    """Removes expired values of the states with a TTL, one key group per :meth:`sweep`."""

    def __init__(self, *, backend: KeyedStateBackend, clock: Clock,
                 interval_ms: int = 1_000) -> None:
        self._backend = backend
        self._clock = clock
        self._interval = interval_ms
        self._values: set[str] = set()
        self._maps: set[str] = set()
        self._next_group = 0
        self._next_run = 0
        self.removed = 0
        """Values and map entries removed so far by sweeps (reads remove more)."""

    def track(self, name: str, *, is_map: bool) -> None:
        (self._maps if is_map else self._values).add(name)

    def maybe_sweep(self) -> None:
        """A sweep if the interval passed since the last one."""
        if not (self._values or self._maps):
            return
        now = self._clock()
        if now < self._next_run:
            return
        self._next_run = now + self._interval
        self.sweep(now)

    def sweep(self, now: int) -> None:
        groups = self._backend.key_groups
        key_group = groups[self._next_group % len(groups)]
        self._next_group += 1
        backend = self._backend
        one = range(key_group, key_group + 1)
        for name in self._values:
            for _, key, stored in backend.iter_entries(name, key_groups=one):
                if not live(stored, now):
                    backend.delete(name, key_group, key)
                    self.removed += 1
        for name in self._maps:
            for _, key, entries in backend.iter_entries(name, key_groups=one):
                gone = [user_key for user_key, stored in entries.items() if not live(stored, now)]
                if len(gone) == len(entries):
                    backend.delete(name, key_group, key)
                else:
                    for user_key in gone:
                        backend.map_remove(name, key_group, key, user_key)
                self.removed += len(gone)
