"""Keyed, stateful operators: ``reduce``, ``process`` and the vectorised ``aggregate``.

Each operator owns the state of the key groups of its subtask and snapshots it
in two parts: :meth:`snapshot` is the synchronous part (references and flags
only, no copies) and returns an object whose ``serialize`` runs later in the
background thread.
"""

from __future__ import annotations

import abc
import pickle
import traceback
from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from job_runtime.errors import UserCodeError
from job_runtime.operators.accumulators import (
    accumulator_specs,
    arrow_columns,
    check_partial,
    factorize,
    fold,
    initial,
    is_partial,
    merge_into,
)
from job_runtime.pipeline import KeyedOp
from job_runtime.records import Batch, Record, key_group_of, key_groups_of_array
from job_runtime.state.backend import (
    AnySnapshot,
    StateBackendSettings,
)
from job_runtime.state.backends import create_backend, restore_keyed_state
from job_runtime.state.handles import ProcessContext


class StateSnapshot(Protocol):
    def serialize(self) -> bytes: ...


class KeyedOperator(abc.ABC):
    def __init__(self, *, op: KeyedOp, subtask: int, key_groups: range,
                 max_parallelism: int, state: StateBackendSettings | None = None) -> None:
        self.op = op
        self.subtask = subtask
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        self.state = state or StateBackendSettings()

    @abc.abstractmethod
    def process(self, batch: Batch) -> Batch: ...

    @abc.abstractmethod
    def snapshot(self) -> AnySnapshot: ...

    @abc.abstractmethod
    def restore(self, blobs: Iterable[bytes]) -> int:
        """Load the owned key groups from state files of any parallelism; returns keys."""

    @abc.abstractmethod
    def key_count(self) -> int: ...

    def notify_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed (an incremental backend reuses its files)."""
        return None

    def _fail(self, exc: BaseException) -> UserCodeError:
        details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return UserCodeError(operator=self.op.uid, subtask=self.subtask, details=details)


class _RecordKeyed(KeyedOperator):
    """Shared part of ``reduce`` and ``process``: hashmap state, one record at a time."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.backend = create_backend(self.state, key_groups=self.key_groups,
                                      operator=self.op.uid, subtask=self.subtask)

    def _keys(self, batch: Batch) -> tuple[list[Any], list[int]]:
        key = self.op.key.key
        if isinstance(key, str):
            if batch.has_arrow:
                column = batch.arrow.column(key)
                return column.to_pylist(), key_groups_of_array(column,
                                                               self.max_parallelism).tolist()
            keys = [r[key] for r in batch.rows]
        else:
            keys = [key(r) for r in batch.rows]
        mp = self.max_parallelism
        return keys, [key_group_of(k, mp) for k in keys]

    def snapshot(self) -> AnySnapshot:
        return self.backend.snapshot()

    def restore(self, blobs: Iterable[bytes]) -> int:
        return restore_keyed_state(self.backend, blobs, settings=self.state)

    def key_count(self) -> int:
        return self.backend.key_count()

    def notify_complete(self, checkpoint_id: int) -> None:
        self.backend.notify_complete(checkpoint_id)


class ReduceOperator(_RecordKeyed):
    def process(self, batch: Batch) -> Batch:
        rows = batch.rows
        try:
            keys, groups = self._keys(batch)
        except Exception as exc:
            raise self._fail(exc) from exc
        fn = self.op.fn
        assert fn is not None
        name = self.op.uid
        backend = self.backend
        out: list[Record] = []
        try:
            for row, key, group in zip(rows, keys, groups, strict=True):
                previous = backend.get(name, group, key)
                value = row if previous is None else fn(previous, row)
                backend.put(name, group, key, value)
                out.append(value)
        except Exception as exc:
            raise self._fail(exc) from exc
        return Batch(rows=out)


class ProcessOperator(_RecordKeyed):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.context = ProcessContext(backend=self.backend, operator=self.op.uid)

    def process(self, batch: Batch) -> Batch:
        rows = batch.rows
        fn = self.op.fn
        assert fn is not None
        ctx = self.context
        out: list[Record] = []
        try:
            keys, groups = self._keys(batch)
            for row, key, group in zip(rows, keys, groups, strict=True):
                ctx.set_key(key, group)
                produced = fn(row, ctx)
                if produced is not None:
                    out.extend(produced)
        except Exception as exc:
            raise self._fail(exc) from exc
        return Batch(rows=out)


class _AggregateSnapshot:
    def __init__(self, *, keys: np.ndarray, groups: np.ndarray,
                 accumulators: dict[str, np.ndarray]) -> None:
        self.keys = keys
        self.groups = groups
        self.accumulators = accumulators

    def serialize(self) -> bytes:
        payload = {"version": 1, "keys": self.keys, "groups": self.groups,
                   "accumulators": self.accumulators}
        return pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)

    def key_count(self) -> int:
        return len(self.keys)


class AggregateOperator(KeyedOperator):
    """count/sum/min/max/mean per key with numpy arrays indexed by a slot per key.

    The key-to-slot index is a pandas index (a C hash table), so a batch is
    aggregated without a Python loop over its records or its keys.

    Snapshots are copy-on-write: a snapshot takes the current arrays as they are
    and marks them shared; the first batch after it that changes accumulators in
    place copies them first (once per checkpoint interval), and a batch with new
    keys needs no extra copy, since growing already builds new arrays. The keys
    and key-group arrays are never changed in place. So the barrier costs
    microseconds whatever the number of keys; the copy is paid while processing.
    """

    def __init__(self, **kwargs: Any) -> None:
        # pandas is imported here, not with the module: it is half a second of every
        # Python worker's start, and only this operator needs it.
        import pandas as pd

        super().__init__(**kwargs)
        self.key_column = self.op.key.key
        assert isinstance(self.key_column, str)
        self._index = pd.Index([])
        self._keys = np.empty(0, dtype=object)
        self._groups = np.empty(0, dtype=np.int64)
        self._size = 0
        self._acc: dict[str, np.ndarray] = {}
        self._acc_shared = False
        self.array_copies = 0
        """Accumulator arrays copied because a snapshot still held them (observable
        by tests and benchmarks: at most one per accumulator and interval)."""
        self._acc_specs = accumulator_specs(self.op.aggregates)

    def _grow(self, new_keys: np.ndarray) -> None:
        import pandas as pd

        n_new = len(new_keys)
        # Restored keys come as objects: a list lets pandas infer their type again.
        added = pd.Index(new_keys.tolist() if new_keys.dtype == object else new_keys)
        # Started from the new keys' own index while empty: an empty index has no
        # type, and the keys' type (int64 rather than object) keeps lookups fast.
        self._index = added if not self._size else self._index.append(added)
        self._keys = np.concatenate([self._keys, new_keys.astype(object)])
        groups = key_groups_of_array(pa.array(new_keys.tolist()), self.max_parallelism)
        self._groups = np.concatenate([self._groups, groups])
        for name, (func, _) in self._acc_specs.items():
            current = self._acc.get(name, initial(func, 0))
            self._acc[name] = np.concatenate([current, initial(func, n_new)])
        # New arrays throughout: a snapshot holding the old ones is safe from here on.
        self._acc_shared = False
        self._size += n_new

    def _own_accumulators(self) -> None:
        """Copy the accumulators before an in-place change if a snapshot holds them."""
        if self._acc_shared:
            for name, values in self._acc.items():
                self._acc[name] = values.copy()
                self.array_copies += 1
            self._acc_shared = False

    def process(self, batch: Batch) -> Batch:
        try:
            return self._process(batch)
        except UserCodeError:
            raise
        except Exception as exc:
            raise self._fail(exc) from exc

    def _process(self, batch: Batch) -> Batch:
        arrow = batch.arrow
        # Partial aggregates from a combiner before the exchange, or records (a job
        # without a combiner, or records replayed from an older checkpoint).
        partial = is_partial(arrow)
        if partial:
            check_partial(arrow.schema.names, self._acc_specs)
        keys = arrow.column(self.key_column).to_numpy(zero_copy_only=False)
        codes, uniques = factorize(np.asarray(keys))
        slots_u = self._index.get_indexer(uniques) if self._size else np.full(len(uniques), -1)
        missing = slots_u < 0
        if missing.any():
            start = self._size
            self._grow(np.asarray(uniques[missing]))
            slots_u = slots_u.copy()
            slots_u[missing] = np.arange(start, self._size)
        self._own_accumulators()
        folded = fold(column=arrow_columns(arrow), codes=codes, n_unique=len(uniques),
                      specs=self._acc_specs, partial=partial)
        merge_into(self._acc, slots_u, folded, self._acc_specs)
        # The batch's distinct keys are the touched keys, in the order of ``slots_u``,
        # already typed: no Python object per key on the way out.
        key_type = arrow.schema.field(self.key_column).type
        names = [str(self.key_column)]
        arrays: list[pa.Array] = [pa.array(np.asarray(uniques), type=key_type)]
        for out, func, column in self.op.aggregates:
            if func == "count":
                values = self._acc["count"][slots_u]
            elif func == "mean":
                values = self._acc[f"sum:{column}"][slots_u] / self._acc["count"][slots_u]
            else:
                values = self._acc[f"{func}:{column}"][slots_u]
            names.append(out)
            arrays.append(pa.array(values))
        return Batch(arrow=pa.RecordBatch.from_arrays(arrays, names=names))

    def snapshot(self) -> StateSnapshot:
        """References only: the arrays are copied by the next write that needs it."""
        self._acc_shared = True
        return _AggregateSnapshot(keys=self._keys, groups=self._groups,
                                  accumulators=dict(self._acc))

    def restore(self, blobs: Iterable[bytes]) -> int:
        restored = 0
        lo, hi = self.key_groups.start, self.key_groups.stop
        for blob in blobs:
            payload = pickle.loads(blob)
            groups = payload["groups"]
            mask = (groups >= lo) & (groups < hi)
            if not mask.any():
                continue
            keys = payload["keys"][mask]
            start = self._size
            self._grow(np.asarray(keys))
            self._own_accumulators()
            for name, values in payload["accumulators"].items():
                if name in self._acc:
                    self._acc[name][start:self._size] = values[mask]
            restored += int(mask.sum())
        return restored

    def key_count(self) -> int:
        return self._size


def build_keyed_operator(*, op: KeyedOp, subtask: int, key_groups: range,
                         max_parallelism: int,
                         state: StateBackendSettings | None = None) -> KeyedOperator:
    kinds: dict[str, type[KeyedOperator]] = {
        "reduce": ReduceOperator, "process": ProcessOperator, "aggregate": AggregateOperator,
    }
    return kinds[op.kind](op=op, subtask=subtask, key_groups=key_groups,
                          max_parallelism=max_parallelism, state=state)
