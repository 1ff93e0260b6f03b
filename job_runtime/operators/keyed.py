"""Keyed, stateful operators: ``reduce``, ``process`` and the vectorised ``aggregate``
(windowed: :mod:`job_runtime.operators.window_aggregate`, sessions:
:mod:`job_runtime.operators.session_window`, a function per window:
:mod:`job_runtime.operators.window_function`, a table's rows:
:mod:`job_runtime.operators.enrichment`).

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

from job_runtime.errors import UserCodeError
from job_runtime.operators.accumulators import (
    accumulator_specs,
    arrow_columns,
    check_partial,
    fold,
    key_columns_of,
    partial_identities,
)
from job_runtime.operators.enrichment import EnrichOperator
from job_runtime.operators.interval_join import IntervalJoinOperator
from job_runtime.operators.key_families import typed_keys
from job_runtime.operators.key_numbering import factorize_keys
from job_runtime.operators.key_table import KeyTable
from job_runtime.operators.keyed_operator import KeyedOperator, StateSnapshot
from job_runtime.operators.record_keyed import RecordKeyedOperator
from job_runtime.operators.session_function import SessionProcessOperator, SessionReduceOperator
from job_runtime.operators.session_window import SessionWindowOperator
from job_runtime.operators.window_aggregate import WindowAggregateOperator
from job_runtime.operators.window_function import WindowProcessOperator, WindowReduceOperator
from job_runtime.operators.window_join import WindowJoinOperator
from job_runtime.pipeline import KeyedKind, KeyedOp
from job_runtime.records import Batch, BatchKind, Record, key_array
from job_runtime.state.backend import (
    StateBackendSettings,
)
from job_runtime.state.handles import ProcessContext
from job_runtime.state.timers import TimeDomain, TimerService
from job_runtime.state.ttl import Clock, wall_clock_ms
from job_runtime.watermarks import record_times


class ReduceOperator(RecordKeyedOperator):
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


class ProcessOperator(RecordKeyedOperator):
    """``process(fn, on_timer=...)``: the user's function per record, with the key's
    state and timers in scope; ``on_timer`` when a timer is due (event-time timers as
    the watermark passes them, before it is forwarded; processing-time timers when
    the task looks at the clock, between batches), on the task thread either way."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.timers = TimerService(backend=self.backend, operator=self.op.uid)
        self.context = ProcessContext(
            backend=self.backend, operator=self.op.uid,
            timers=self.timers if self.op.on_timer is not None else None,
            event_time=self.op.event_time is not None, clock=self.clock,
            output=self.side.add)

    def _timestamps(self, batch: Batch) -> list[int | None]:
        column = self.op.event_time
        if column is None:
            return [None] * len(batch)
        stamps, _ = record_times(batch, column=column, operator=self.op.uid,
                                 subtask=self.subtask)
        return list(stamps)

    def process(self, batch: Batch) -> Batch:
        fn = self.op.fn
        assert fn is not None
        ctx = self.context
        out: list[Record] = []
        try:
            keys, groups = self._keys(batch)
            stamps = self._timestamps(batch)
            rows = batch.rows
            for row, key, group, stamp in zip(rows, keys, groups, stamps, strict=True):
                ctx.set_key(key, group)
                ctx.timestamp = stamp
                produced = fn(row, ctx)
                if produced is not None:
                    out.extend(produced)
        except UserCodeError:
            raise
        except Exception as exc:
            raise self._fail(exc) from exc
        return Batch(rows=out)

    def _fire(self, domain: TimeDomain, time: int) -> Batch:
        on_timer = self.op.on_timer
        if on_timer is None:
            return Batch(rows=[])
        ctx = self.context
        out: list[Record] = []
        try:
            ctx.time_domain = domain
            for timestamp, key, group in self.timers.pop_due(domain, time):
                ctx.set_key(key, group)
                ctx.timestamp = timestamp
                produced = on_timer(timestamp, ctx)
                if produced is not None:
                    out.extend(produced)
        except Exception as exc:
            raise self._fail(exc) from exc
        finally:
            ctx.time_domain = None
        return Batch(rows=out)

    def on_watermark(self, watermark: int) -> Batch:
        self.context.current_watermark = watermark
        return self._fire(TimeDomain.EVENT_TIME, watermark)

    def on_processing_time(self, now: int) -> Batch:
        self.context.sweeper.maybe_sweep()
        due = self.timers.next_due(TimeDomain.PROCESSING_TIME)
        if due is None or due > now:
            return Batch(rows=[])
        return self._fire(TimeDomain.PROCESSING_TIME, now)

    def restore(self, blobs: Iterable[bytes]) -> int:
        restored = super().restore(blobs)
        self.timers.restore()
        return restored


AGGREGATE_SNAPSHOT_VERSION = 2
"""Version 2 keeps the keys as an Arrow array (version 1: a numpy array of Python
objects; both restore)."""


class _AggregateSnapshot:
    def __init__(self, payload: dict[str, Any]) -> None:
        self.keys: pa.Array | np.ndarray = payload["keys"]
        self.groups: np.ndarray = payload["groups"]
        self.accumulators: dict[str, np.ndarray] = payload["accumulators"]

    def serialize(self) -> bytes:
        payload = {"version": AGGREGATE_SNAPSHOT_VERSION, "keys": self.keys, "groups": self.groups,
                   "accumulators": self.accumulators}
        return pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)

    def key_count(self) -> int:
        return len(self.keys)


class AggregateOperator(KeyedOperator):
    """count/sum/min/max/mean per key, vectorised over a :class:`KeyTable` (copy-on-write
    snapshots: the barrier costs microseconds whatever the number of keys)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        key = self.op.key.key
        assert isinstance(key, str | tuple)
        self.key: str | tuple[str, ...] = key
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
        partial = batch.kind is BatchKind.PARTIAL
        if partial:
            check_partial(arrow.schema.names, self._acc_specs)
        key_column = key_array(arrow, self.key)
        identities = partial_identities(batch)
        if identities is not None:
            # A combiner's rows: distinct keys, hashed before the exchange.
            codes, uniques = np.arange(len(key_column)), key_column
        else:
            codes, uniques = factorize_keys(key_column)
        slots = self.table.slots(uniques, identities=identities)
        folded = fold(column=arrow_columns(arrow), codes=codes, n_unique=len(uniques),
                      specs=self._acc_specs, partial=partial)
        self.table.merge(slots, folded)
        # The batch's distinct keys are the touched keys, in the order of ``slots``,
        # already typed: no Python object per key on the way out.
        key_names, key_arrays = key_columns_of(self.key, typed_keys(uniques, key_column.type))
        names, arrays = self.table.output(self.op.aggregates, slots)
        return Batch(arrow=pa.RecordBatch.from_arrays([*key_arrays, *arrays],
                                                      names=[*key_names, *names]))

    def snapshot(self) -> StateSnapshot:
        """References only: the arrays are copied by the next write that needs it."""
        return _AggregateSnapshot(self.table.snapshot())

    def restore(self, blobs: Iterable[bytes]) -> int:
        restored = 0
        for blob in blobs:
            payload = pickle.loads(blob)
            if payload.get("version") not in (1, AGGREGATE_SNAPSHOT_VERSION):
                raise ValueError(f"aggregate state of version {payload.get('version')!r}: this "
                                 f"runtime reads versions 1 to {AGGREGATE_SNAPSHOT_VERSION}")
            restored += self.table.restore(payload, key_groups=self.key_groups)
        return restored

    def key_count(self) -> int:
        return self.table.size


def build_keyed_operator(*, op: KeyedOp, subtask: int, key_groups: range,
                         max_parallelism: int, state: StateBackendSettings | None = None,
                         clock: Clock = wall_clock_ms) -> KeyedOperator:
    kinds: dict[KeyedKind, type[KeyedOperator]] = {
        KeyedKind.REDUCE: ReduceOperator, KeyedKind.PROCESS: ProcessOperator,
        KeyedKind.AGGREGATE: AggregateOperator,
        KeyedKind.WINDOW_AGGREGATE: WindowAggregateOperator,
        KeyedKind.SESSION_AGGREGATE: SessionWindowOperator,
        KeyedKind.WINDOW_REDUCE: WindowReduceOperator,
        KeyedKind.WINDOW_PROCESS: WindowProcessOperator,
        KeyedKind.SESSION_REDUCE: SessionReduceOperator,
        KeyedKind.SESSION_PROCESS: SessionProcessOperator,
        KeyedKind.ENRICH: EnrichOperator,
        KeyedKind.INTERVAL_JOIN: IntervalJoinOperator,
        KeyedKind.WINDOW_JOIN: WindowJoinOperator,
    }
    return kinds[op.kind](op=op, subtask=subtask, key_groups=key_groups,
                          max_parallelism=max_parallelism, state=state, clock=clock)
