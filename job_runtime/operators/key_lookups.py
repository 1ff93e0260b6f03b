"""Identities to slots: the lookups a :class:`~job_runtime.operators.key_index.KeyIndex`
keeps, each with ``find`` (``-1`` where unknown) and ``add``.

Integer keys that fill their range are found by direct addressing (one array indexed
by the key, :class:`DenseLookup`); other identities sit in a compiled hash table of
64-bit integers (pandas', :class:`HashedLookup`), which takes new keys in place, so no
per-batch rebuild over every key; where pandas lacks it, in sorted arrays searched with
``searchsorted`` instead (:class:`SortedLookup`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from job_runtime.operators.key_numbering import DENSE_SPAN_FACTOR


class SortedLookup:
    """Identities (``uint64``) to slots: a large sorted array and a small sorted delta."""

    def __init__(self) -> None:
        self._ids = np.empty(0, dtype=np.uint64)
        self._slots = np.empty(0, dtype=np.int64)
        self._delta_ids = np.empty(0, dtype=np.uint64)
        self._delta_slots = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._ids) + len(self._delta_ids)

    @staticmethod
    def _find(ids: np.ndarray, slots: np.ndarray, probe: np.ndarray, order: np.ndarray,
              out: np.ndarray) -> None:
        if not len(ids):
            return
        sorted_probe = probe[order]
        at = np.searchsorted(ids, sorted_probe)
        inside = at < len(ids)
        at[~inside] = 0
        hit = inside & (ids[at] == sorted_probe)
        out[order[hit]] = slots[at[hit]]

    def find(self, probe: np.ndarray) -> np.ndarray:
        """The slot of each identity, ``-1`` where unknown."""
        out = np.full(len(probe), -1, dtype=np.int64)
        if not len(self) or not len(probe):
            return out
        order = np.argsort(probe, kind="stable")
        self._find(self._ids, self._slots, probe, order, out)
        self._find(self._delta_ids, self._delta_slots, probe, order, out)
        return out

    def add(self, ids: np.ndarray, slots: np.ndarray) -> None:
        """Add distinct identities not present yet."""
        order = np.argsort(ids, kind="stable")
        ids, slots = ids[order], slots[order]
        at = np.searchsorted(self._delta_ids, ids)
        self._delta_ids = np.insert(self._delta_ids, at, ids)
        self._delta_slots = np.insert(self._delta_slots, at, slots)
        if len(self._delta_ids) * 8 > len(self._ids) + (1 << 14):
            at = np.searchsorted(self._ids, self._delta_ids)
            self._ids = np.insert(self._ids, at, self._delta_ids)
            self._slots = np.insert(self._slots, at, self._delta_slots)
            self._delta_ids = np.empty(0, dtype=np.uint64)
            self._delta_slots = np.empty(0, dtype=np.int64)


class HashedLookup:
    """Identities to slots in a compiled hash table (pandas' ``Int64HashTable``): a
    lookup costs one probe per identity, where a search of sorted arrays costs a sort
    of the probe and a binary search of each (five times slower over a million keys),
    and adding keys inserts them without moving the others."""

    def __init__(self, table: Any) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    def find(self, probe: np.ndarray) -> np.ndarray:
        """The slot of each identity, ``-1`` where unknown."""
        if not len(self._table) or not len(probe):
            return np.full(len(probe), -1, dtype=np.int64)
        return np.asarray(self._table.lookup(np.ascontiguousarray(probe).view(np.int64)),
                          dtype=np.int64)

    def add(self, ids: np.ndarray, slots: np.ndarray) -> None:
        """Add identities not present yet (one given twice keeps its last slot)."""
        if len(ids):
            self._table.map_keys_to_values(np.ascontiguousarray(ids).view(np.int64),
                                           np.ascontiguousarray(slots, dtype=np.int64))

    def add_new(self, ids: np.ndarray, slots: np.ndarray) -> bool:
        """:meth:`add`; whether every identity was new and distinct (the table grew by
        as many)."""
        before = len(self._table)
        self.add(ids, slots)
        return len(self._table) - before == len(ids)


def searched_lookup() -> HashedLookup | SortedLookup:
    """A lookup of identities that are searched for (not directly addressed): the
    compiled hash table where pandas provides it, sorted arrays otherwise."""
    try:
        from pandas._libs.hashtable import Int64HashTable
    except ImportError:
        return SortedLookup()
    table = Int64HashTable(1 << 10)
    if not hasattr(table, "map_keys_to_values"):
        return SortedLookup()
    return HashedLookup(table)


class DenseLookup:
    """Integer keys that fill their range (ids, buckets, ``seq % n``): the slot of key
    ``k`` sits at ``k - low`` of one array, found by indexing, with no search at all."""

    def __init__(self) -> None:
        self._low = 0
        self._slots = np.empty(0, dtype=np.int64)
        self._count = 0

    def find(self, probe: np.ndarray) -> np.ndarray:
        values = probe.view(np.int64)
        out = np.full(len(values), -1, dtype=np.int64)
        if not self._count or not len(values):
            return out
        high = min(self._low + len(self._slots) - 1, 2**63 - 1)
        inside = (values >= self._low) & (values <= high)
        out[inside] = self._slots[values[inside] - self._low]
        return out

    def add(self, ids: np.ndarray, slots: np.ndarray) -> bool:
        """Add distinct keys not present yet; ``False`` (and nothing added) when the
        keys would no longer fill their range densely."""
        if not len(ids):
            return True
        values = ids.view(np.int64)
        low, high = int(values.min()), int(values.max())
        if self._count:
            low, high = min(low, self._low), max(high, self._low + len(self._slots) - 1)
        span = high - low + 1
        if span > max(DENSE_SPAN_FACTOR * (self._count + len(values)), 1 << 16):
            return False
        if not self._count or low < self._low or span > len(self._slots):
            # Room above for keys that keep growing (ids, sequence numbers).
            grown = np.full(span + span // 2, -1, dtype=np.int64)
            if self._count:
                start = self._low - low
                grown[start:start + len(self._slots)] = self._slots
            self._slots, self._low = grown, low
        self._slots[values - self._low] = slots
        self._count += len(values)
        return True
