"""Accumulators per key in numpy arrays: the state of ``aggregate``, and of each open
window of a windowed ``aggregate``.

A key has a slot; its accumulators are the slot's entries of one array per
accumulator. The key-to-slot index is a :class:`~job_runtime.operators.key_index.KeyIndex`
(keys in Arrow arrays, found by a vectorised identity), so a batch is folded in
without a Python loop, or a Python object, per record or per key.

Snapshots are copy-on-write: a snapshot takes the current arrays as they are and
marks them shared; the first batch after it that changes accumulators in place
copies them first (once per checkpoint interval), and a batch with new keys needs no
extra copy, since growing already builds new arrays. The keys and key-group arrays
are never changed in place. So the barrier costs microseconds whatever the number
of keys; the copy is paid while processing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from job_runtime.operators.accumulators import AccumulatorSpecs, initial, merge_into
from job_runtime.operators.key_index import KeyFamily, KeyIndex, key_groups_of_identities
from job_runtime.records import key_groups_of_array

_IDENTIFIED = (KeyFamily.STRING, KeyFamily.BINARY)
"""Families whose identities give their key groups."""


class KeyTable:
    """The accumulators ``specs`` of every key seen, one slot per key."""

    def __init__(self, *, specs: AccumulatorSpecs, max_parallelism: int) -> None:
        self._specs = specs
        self._max_parallelism = max_parallelism
        self.index = KeyIndex()
        self.groups = np.empty(0, dtype=np.int64)
        self.acc: dict[str, np.ndarray] = {}
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
        if self.size > start:
            # The new keys are hashed from the batch's own keys, not taken back out of
            # the index (which would gather its whole key store on every new key).
            new_slots, first = np.unique(slots[slots >= start], return_index=True)
            at = np.flatnonzero(slots >= start)[first]
            if len(new_slots) != self.size - start:
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
        n_new = self.size - start
        if groups is None:
            if new_keys is None:
                new_keys = self.index.take(np.arange(start, self.size))
            groups = key_groups_of_array(new_keys, self._max_parallelism)
        self.groups = np.concatenate([self.groups, groups])
        for name, (func, _) in self._specs.items():
            current = self.acc.get(name, initial(func, 0))
            self.acc[name] = np.concatenate([current, initial(func, n_new)])
        # New arrays throughout: a snapshot holding the old ones is safe from here on.
        self._shared = False

    def merge(self, slots: np.ndarray, folded: dict[str, np.ndarray]) -> None:
        """Fold per-key partials in at ``slots`` (distinct), copying shared arrays first."""
        if self._shared:
            for name, values in self.acc.items():
                self.acc[name] = values.copy()
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


def _object_array(values: list[Any]) -> np.ndarray:
    """A one-dimensional numpy array of Python values (tuples stay values)."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out
