"""Accumulators per key in numpy arrays: the state of ``aggregate``, and of each open
window of a windowed ``aggregate``.

A key has a slot; its accumulators are the slot's entries of one array per
accumulator. The key-to-slot index is a :class:`~job_runtime.operators.key_index.KeyIndex`
(keys in Arrow arrays, found by a vectorised identity), so a batch is folded in
without a Python loop, or a Python object, per record or per key.

Snapshots are copy-on-write: a snapshot takes the current arrays as they are and
marks them shared; the first batch after it that changes accumulators in place
copies them first (once per checkpoint interval). The arrays are views of the first
``size`` entries of larger ones, whose capacity doubles as keys arrive: a batch with
new keys writes their empty accumulators and key groups past the end of every view
a snapshot holds, so it needs no copy, and adding keys costs what the new keys do,
not a copy of every key held. The keys are never changed in place. So the barrier
costs microseconds whatever the number of keys; the copy is paid while processing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from job_runtime.operators.accumulators import AccumulatorSpecs, initial, merge_into
from job_runtime.operators.key_families import KeyFamily
from job_runtime.operators.key_identity import key_groups_of_identities
from job_runtime.operators.key_index import KeyIndex
from job_runtime.records import key_groups_of_array

_IDENTIFIED = (KeyFamily.STRING, KeyFamily.BINARY)
"""Families whose identities give their key groups."""


class KeyTable:
    """The accumulators ``specs`` of every key seen, one slot per key."""

    def __init__(self, *, specs: AccumulatorSpecs, max_parallelism: int) -> None:
        self._specs = specs
        self._max_parallelism = max_parallelism
        self.index = KeyIndex()
        self._groups_store = np.empty(0, dtype=np.int64)
        self._acc_store: dict[str, np.ndarray] = {}
        self.groups = self._groups_store
        """The key group of each slot (a view of the first ``size`` entries)."""
        self.acc: dict[str, np.ndarray] = {}
        """The accumulators of each slot, per accumulator (views, as ``groups``)."""
        self._shared = False
        self.array_copies = 0
        """Accumulator arrays copied because a snapshot still held them (observable
        by tests and benchmarks: at most one per accumulator and interval)."""

    @property
    def size(self) -> int:
        return self.index.size

    def key_values(self, slots: np.ndarray) -> pa.Array:
        """The keys at ``slots``."""
        return self.index.take(slots)

    def slots(self, uniques: pa.Array, *, identities: np.ndarray | None = None) -> np.ndarray:
        """The slots of distinct keys, new keys given new slots (``identities``: the
        keys' string identities, when a combiner sent them)."""
        start = self.size
        slots = self.index.slots(uniques, identities=identities)
        n_new = self.size - start
        if n_new:
            # The new keys are hashed from the batch's own keys, not taken back out of
            # the index (which would gather its whole key store on every new key).
            # Each new slot appears once: ``at[i]`` is the row of slot ``start + i``.
            fresh = np.flatnonzero(slots >= start)
            at = np.full(n_new, -1, dtype=np.int64)
            at[slots[fresh] - start] = fresh
            if len(fresh) != n_new or (at < 0).any():
                self._grown(start)
            elif identities is not None and self.index.family in _IDENTIFIED:
                self._grown(start, groups=key_groups_of_identities(
                    identities[at], self._max_parallelism,
                    nulls_from=uniques.take(pa.array(at))))
            else:
                self._grown(start, new_keys=uniques.take(pa.array(at)))
        return slots

    def _grown(self, start: int, *, new_keys: pa.Array | None = None,
               groups: np.ndarray | None = None) -> None:
        """New slots from ``start`` on: their key groups (``groups``, or hashed from
        ``new_keys``, the keys of those slots in order, or from the index) and empty
        accumulators."""
        size = self.size
        if groups is None:
            if new_keys is None:
                new_keys = self.index.take(np.arange(start, size))
            groups = key_groups_of_array(new_keys, self._max_parallelism)
        if size > len(self._groups_store):
            capacity = max(size, 2 * len(self._groups_store), 1024)
            self._groups_store = _with_capacity(self._groups_store[:start], capacity, 0)
            for name, (func, _) in self._specs.items():
                held = self._acc_store.get(name, initial(func, 0))[:start]
                self._acc_store[name] = _with_capacity(held, capacity, initial(func, 1)[0])
            # New arrays throughout: a snapshot holding the old ones is safe from here on.
            self._shared = False
        self._groups_store[start:size] = groups
        self.groups = self._groups_store[:size]
        for name, (func, _) in self._specs.items():
            store = self._acc_store[name]
            store[start:size] = initial(func, 1)[0]
            self.acc[name] = store[:size]

    def merge(self, slots: np.ndarray, folded: dict[str, np.ndarray]) -> None:
        """Fold per-key partials in at ``slots`` (distinct), copying shared arrays first."""
        if self._shared:
            for name in self.acc:
                self._acc_store[name] = self._acc_store[name].copy()
                self.acc[name] = self._acc_store[name][:self.size]
                self.array_copies += 1
            self._shared = False
        merge_into(self.acc, slots, folded, self._specs)

    def output(self, aggregates: tuple[tuple[str, str, str | None], ...],
               slots: np.ndarray) -> tuple[list[str], list[pa.Array]]:
        """The columns ``aggregate(out=(func, column))`` emits for the keys at ``slots``."""
        names: list[str] = []
        arrays: list[pa.Array] = []
        for out, func, column in aggregates:
            if func == "count":
                values = self.acc["count"][slots]
            elif func == "mean":
                values = self.acc[f"sum:{column}"][slots] / self.acc["count"][slots]
            else:
                values = self.acc[f"{func}:{column}"][slots]
            names.append(out)
            arrays.append(pa.array(values))
        return names, arrays

    def snapshot(self) -> dict[str, Any]:
        """References only: the arrays are copied by the next write that needs it.

        ``keys`` is an Arrow array, or (keys of several types) a numpy array of
        Python values, the form every earlier snapshot has."""
        self._shared = True
        keys: pa.Array | np.ndarray = self.index.keys if self.index.family != KeyFamily.OBJECT \
            else _object_array(self.index.object_values())
        return {"keys": keys, "groups": self.groups, "accumulators": dict(self.acc)}

    def restore(self, payload: dict[str, Any], *, key_groups: range) -> int:
        """Add the keys of ``payload`` (a :meth:`snapshot`, or an older one whose keys
        are a numpy array) in ``key_groups``; returns how many."""
        groups = payload["groups"]
        mask = (groups >= key_groups.start) & (groups < key_groups.stop)
        if not mask.any():
            return 0
        keys = payload["keys"]
        start = self.size
        if isinstance(keys, np.ndarray):
            slots = self.index.slots_of_values(keys[mask].tolist())
        else:
            slots = self.index.slots(keys.filter(pa.array(mask)))
        if self.size > start:
            self._grown(start)
        if not np.array_equal(slots, np.arange(start, start + len(slots))):
            raise ValueError("a restored key table holds a key twice, or a key of another "
                             "table: the checkpoint's key groups overlap")
        for name, values in payload["accumulators"].items():
            if name in self.acc:
                self.acc[name][start:self.size] = values[mask]
        return int(mask.sum())


def _with_capacity(values: np.ndarray, capacity: int, fill: Any) -> np.ndarray:
    """A new array of ``capacity`` entries starting with ``values``, the rest ``fill``."""
    out = np.full(capacity, fill, dtype=values.dtype)
    out[:len(values)] = values
    return out


def _object_array(values: list[Any]) -> np.ndarray:
    """A one-dimensional numpy array of Python values (tuples stay values)."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out
