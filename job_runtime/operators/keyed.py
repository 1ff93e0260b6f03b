"""Keyed, stateful operators: ``reduce``, ``process`` and the vectorised ``aggregate``
(windowed: :mod:`job_runtime.operators.window_aggregate`).

Each operator owns the state of the key groups of its subtask and snapshots it
in two parts: :meth:`snapshot` is the synchronous part (references and flags
only, no copies) and returns an object whose ``serialize`` runs later in the
background thread.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from job_runtime.operators.accumulators import (
    accumulator_specs,
    arrow_columns,
    check_partial,
    factorize,
    fold,
    is_partial,
)
from job_runtime.operators.base import KeyedOperator, StateSnapshot
from job_runtime.operators.key_table import KeyTable
from job_runtime.operators.window_aggregate import WindowAggregateOperator
from job_runtime.pipeline import KeyedOp
from job_runtime.records import Batch, Record, key_group_of, key_groups_of_array
from job_runtime.state.backend import (
    AnySnapshot,
    StateBackendSettings,
)
from job_runtime.state.backends import create_backend, restore_keyed_state
from job_runtime.state.handles import ProcessContext


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
    def __init__(self, payload: dict[str, Any]) -> None:
        self.keys: np.ndarray = payload["keys"]
        self.groups: np.ndarray = payload["groups"]
        self.accumulators: dict[str, np.ndarray] = payload["accumulators"]

    def serialize(self) -> bytes:
        payload = {"version": 1, "keys": self.keys, "groups": self.groups,
                   "accumulators": self.accumulators}
        return pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)

    def key_count(self) -> int:
        return len(self.keys)


class AggregateOperator(KeyedOperator):
    """count/sum/min/max/mean per key, vectorised over a :class:`KeyTable` (copy-on-write
    snapshots: the barrier costs microseconds whatever the number of keys)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key_column = self.op.key.key
        assert isinstance(self.key_column, str)
        self._acc_specs = accumulator_specs(self.op.aggregates)
        self.table = KeyTable(specs=self._acc_specs, max_parallelism=self.max_parallelism)

    @property
    def array_copies(self) -> int:
        return self.table.array_copies

    def process(self, batch: Batch) -> Batch:
        return self._vectorised(self._process, batch)

    def _process(self, batch: Batch) -> Batch:
        arrow = batch.arrow
        # Partial aggregates from a combiner before the exchange, or records (a job
        # without a combiner, or records replayed from an older checkpoint).
        partial = is_partial(arrow)
        if partial:
            check_partial(arrow.schema.names, self._acc_specs)
        keys = arrow.column(self.key_column).to_numpy(zero_copy_only=False)
        codes, uniques = factorize(np.asarray(keys))
        slots = self.table.slots(uniques)
        folded = fold(column=arrow_columns(arrow), codes=codes, n_unique=len(uniques),
                      specs=self._acc_specs, partial=partial)
        self.table.merge(slots, folded)
        # The batch's distinct keys are the touched keys, in the order of ``slots``,
        # already typed: no Python object per key on the way out.
        key_type = arrow.schema.field(self.key_column).type
        names, arrays = self.table.output(self.op.aggregates, slots)
        return Batch(arrow=pa.RecordBatch.from_arrays(
            [pa.array(np.asarray(uniques), type=key_type), *arrays],
            names=[str(self.key_column), *names]))

    def snapshot(self) -> StateSnapshot:
        """References only: the arrays are copied by the next write that needs it."""
        return _AggregateSnapshot(self.table.snapshot())

    def restore(self, blobs: Iterable[bytes]) -> int:
        return sum(self.table.restore(pickle.loads(blob), key_groups=self.key_groups)
                   for blob in blobs)

    def key_count(self) -> int:
        return self.table.size


def build_keyed_operator(*, op: KeyedOp, subtask: int, key_groups: range,
                         max_parallelism: int,
                         state: StateBackendSettings | None = None) -> KeyedOperator:
    kinds: dict[str, type[KeyedOperator]] = {
        "reduce": ReduceOperator, "process": ProcessOperator, "aggregate": AggregateOperator,
        "window_aggregate": WindowAggregateOperator,
    }
    return kinds[op.kind](op=op, subtask=subtask, key_groups=key_groups,
                          max_parallelism=max_parallelism, state=state)
