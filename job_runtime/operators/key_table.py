"""Accumulators per key in numpy arrays: the state of ``aggregate``, and of each open
window of a windowed ``aggregate``.

A key has a slot; its accumulators are the slot's entries of one array per
accumulator. The key-to-slot index is a pandas index (a C hash table), so a batch
is folded in without a Python loop over its records or its keys.

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
from job_runtime.records import key_groups_of_array


class KeyTable:
    """The accumulators ``specs`` of every key seen, one slot per key."""

    def __init__(self, *, specs: AccumulatorSpecs, max_parallelism: int) -> None:
        # pandas is imported here, not with the module: it is half a second of every
        # Python worker's start, and only the aggregates need it.
        import pandas as pd

        self._specs = specs
        self._max_parallelism = max_parallelism
        self._index = pd.Index([])
        self.keys = np.empty(0, dtype=object)
        self.groups = np.empty(0, dtype=np.int64)
        self.size = 0
        self.acc: dict[str, np.ndarray] = {}
        self._shared = False
        self.array_copies = 0
        """Accumulator arrays copied because a snapshot still held them (observable
        by tests and benchmarks: at most one per accumulator and interval)."""

    def slots(self, uniques: np.ndarray) -> np.ndarray:
        """The slots of distinct keys, new keys given new slots."""
        slots = self._index.get_indexer(uniques) if self.size else np.full(len(uniques), -1)
        missing = slots < 0
        if missing.any():
            start = self.size
            self._grow(np.asarray(uniques[missing]))
            slots = slots.copy()
            slots[missing] = np.arange(start, self.size)
        return slots

    def _grow(self, new_keys: np.ndarray) -> None:
        import pandas as pd

        n_new = len(new_keys)
        # Restored keys come as objects: a list lets pandas infer their type again.
        added = pd.Index(new_keys.tolist() if new_keys.dtype == object else new_keys)
        # Started from the new keys' own index while empty: an empty index has no
        # type, and the keys' type (int64 rather than object) keeps lookups fast.
        self._index = added if not self.size else self._index.append(added)
        self.keys = np.concatenate([self.keys, new_keys.astype(object)])
        groups = key_groups_of_array(pa.array(new_keys.tolist()), self._max_parallelism)
        self.groups = np.concatenate([self.groups, groups])
        for name, (func, _) in self._specs.items():
            current = self.acc.get(name, initial(func, 0))
            self.acc[name] = np.concatenate([current, initial(func, n_new)])
        # New arrays throughout: a snapshot holding the old ones is safe from here on.
        self._shared = False
        self.size += n_new

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
        """References only: the arrays are copied by the next write that needs it."""
        self._shared = True
        return {"keys": self.keys, "groups": self.groups, "accumulators": dict(self.acc)}

    def restore(self, payload: dict[str, Any], *, key_groups: range) -> int:
        """Add the keys of ``payload`` (a :meth:`snapshot`) in ``key_groups``; returns
        how many."""
        groups = payload["groups"]
        mask = (groups >= key_groups.start) & (groups < key_groups.stop)
        if not mask.any():
            return 0
        keys = payload["keys"][mask]
        start = self.size
        self._grow(np.asarray(keys))
        for name, values in payload["accumulators"].items():
            if name in self.acc:
                self.acc[name][start:self.size] = values[mask]
        return int(mask.sum())
