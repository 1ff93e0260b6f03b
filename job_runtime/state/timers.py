"""Timers of a keyed operator: one per key, time domain and timestamp.

``ctx.timers.register_event_time(ts)`` in a ``process`` function asks for a call of
its ``on_timer`` once the watermark reaches ``ts``; ``register_processing_time(ts)``
once the wall clock does. Like Flink's, a timer belongs to the key it was registered
for, so it is stored in that key's key group: as one more keyed state of the
operator (``<operator>/__timers``, a map per key from ``(domain, timestamp)``), it is
snapshotted copy-on-write by ``hashmap`` and incrementally by ``rocksdb`` with the
rest of the key group, and restored with it at any parallelism. Nothing about timers
is written anywhere else.

What the state cannot give cheaply is the next timer due, so each subtask keeps a
heap per domain beside it, rebuilt from the state on restore. Deleting a timer
removes it from the state only; its heap entry is skipped when it comes up (a heap
entry fires only if the state still holds the timer, which also makes a timer
registered twice fire once). Processing-time timers that fell due while the job was
down fire right after the restore, at the first look at the clock.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Iterator
from typing import Any

from job_runtime.state.backend import KeyedStateBackend

TIMERS_STATE = "__timers"
"""The name, under the operator's, of the state that holds its timers."""


class TimeDomain(enum.StrEnum):
    """Which clock a timer waits for."""

    EVENT_TIME = "event_time"
    PROCESSING_TIME = "processing_time"


class TimerService:
    """The timers of one operator subtask, stored in its keyed state backend."""

    def __init__(self, *, backend: KeyedStateBackend, operator: str) -> None:
        self._backend = backend
        self._name = f"{operator}/{TIMERS_STATE}"
        self._heaps: dict[TimeDomain, list[tuple[int, int, int, Any]]] = {
            domain: [] for domain in TimeDomain}
        self._order = itertools.count()
        """Ties between equal timestamps break on registration order, never on keys
        (which need not be comparable)."""

    def register(self, domain: TimeDomain, timestamp: int, *, key: Any, key_group: int) -> None:
        entry = (domain.value, timestamp)
        current = self._backend.get(self._name, key_group, key)
        if current is not None and entry in current:
            return
        self._backend.map_put(self._name, key_group, key, entry, None)
        heapq.heappush(self._heaps[domain], (timestamp, next(self._order), key_group, key))

    def delete(self, domain: TimeDomain, timestamp: int, *, key: Any, key_group: int) -> None:
        self._backend.map_remove(self._name, key_group, key, (domain.value, timestamp))

    def registered(self, *, key: Any, key_group: int) -> list[tuple[TimeDomain, int]]:
        """The key's timers, earliest first."""
        current = self._backend.get(self._name, key_group, key) or {}
        return sorted((TimeDomain(domain), ts) for domain, ts in current)

    def next_due(self, domain: TimeDomain) -> int | None:
        """The earliest timestamp in the heap (perhaps of a deleted timer), if any."""
        heap = self._heaps[domain]
        return heap[0][0] if heap else None

    def pop_due(self, domain: TimeDomain, time: int) -> Iterator[tuple[int, Any, int]]:
        """``(timestamp, key, key_group)`` of each timer at or before ``time``, earliest
        first, removed from the state as it is handed out. Timers that the caller
        registers meanwhile at or before ``time`` come out too."""
        heap = self._heaps[domain]
        backend = self._backend
        name = self._name
        while heap and heap[0][0] <= time:
            timestamp, _, key_group, key = heapq.heappop(heap)
            entry = (domain.value, timestamp)
            current = backend.get(name, key_group, key)
            if current is None or entry not in current:
                continue  # deleted, or fired already (registered twice)
            if len(current) == 1:
                backend.delete(name, key_group, key)
            else:
                backend.map_remove(name, key_group, key, entry)
            yield timestamp, key, key_group

    def restore(self) -> int:
        """Rebuild the heaps from the restored state; returns the number of timers."""
        for heap in self._heaps.values():
            heap.clear()
        count = 0
        for key_group, key, entries in self._backend.iter_entries(self._name):
            for domain, timestamp in entries:
                self._heaps[TimeDomain(domain)].append(
                    (timestamp, next(self._order), key_group, key))
                count += 1
        for heap in self._heaps.values():
            heapq.heapify(heap)
        return count

    def __len__(self) -> int:
        return sum(len(entries) for _, _, entries in self._backend.iter_entries(self._name))
