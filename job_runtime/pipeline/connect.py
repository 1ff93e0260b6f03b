"""Two keyed streams connected: one function sees the records of both, with the key's
state and timers shared, and the joins built on it.

``a.key_by(k).connect(b.key_by(j))`` needs no new machinery in the exchange. Each side's
records are wrapped before it, by a step of that side's own chain: the side's number
(``ctx.input``: 0 for ``a``, 1 for ``b``) and the key its ``key_by`` names, as two
columns added to each Arrow batch (:class:`TaggedBatches`, no Python call per record),
or, for a key of several columns or a function, each record pickled whole with its
side and key (:class:`Tagged`). The two sides are then a ``union`` keyed by that key.
A connected ``process`` unwraps each record for its function: everything a keyed
``process`` has, a connected one has too: value, map and TTL state per key, event-
and processing-time timers, rescaling through key groups, aligned and unaligned
checkpoints over both inputs, and the minimum of the two inputs' watermarks (a
``union``'s); an input that ends leaves the other running.

The interval join (:meth:`ConnectedStreams.interval_join`) and the window join
(:meth:`ConnectedStreams.window_join`) are operators of their own, vectorised
(:mod:`job_runtime.operators.interval_join`, :mod:`job_runtime.operators.window_join`).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from job_runtime.durations import duration_ms
from job_runtime.errors import PipelineDefinitionError
from job_runtime.pipeline.ops import KeyedKind, KeyedOp, RecordKind
from job_runtime.records import KeySelector, Record, key_of
from job_runtime.windows import WindowAssigner

INPUT = "__cjob_input"
KEY = "__cjob_key"
RECORD = "__cjob_record"
LATE = "late"
"""The side output of a join's records too late to pair."""

JoinFunction = Callable[[Record, Record], Record | None]


class TaggedBatches:
    """The batch function that tags one side's batches for the shared exchange: its
    number and its key column, added as columns."""

    def __init__(self, *, side: int, key: str) -> None:
        self.side = side
        self.key = key

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self.key not in batch.schema.names:
            raise KeyError(f"connect(): the records of stream {self.side + 1} have no "
                           f"column {self.key!r} to key by; their columns: "
                           f"{', '.join(batch.schema.names)}")
        sides = pa.array(np.full(batch.num_rows, self.side, dtype=np.int8))
        return batch.append_column(INPUT, sides).append_column(KEY, batch.column(self.key))


class Tagged:
    """The record function that wraps one side's records whole for the shared exchange
    (a key of several columns or a function: its value is computed per record)."""

    def __init__(self, *, side: int, key: str | tuple[str, ...] | KeySelector,
                 event_time: str | None) -> None:
        self.side = side
        self.key = key
        self.event_time = event_time

    def __call__(self, record: Record) -> Record:
        wrapped = {INPUT: self.side, KEY: key_of(record, self.key),
                   RECORD: pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)}
        if self.event_time is not None:
            wrapped[self.event_time] = record[self.event_time]
        return wrapped


def unwrapped(record: Record, ctx: Any) -> Record:
    """The side's own record, with ``ctx.input`` set to its side."""
    ctx.input = record[INPUT]
    if RECORD in record:
        inner: Record = pickle.loads(record[RECORD])
        return inner
    return {name: value for name, value in record.items() if name not in (INPUT, KEY)}


def tagging(*, side: int, key: str | tuple[str, ...] | KeySelector,
            event_time: str | None) -> tuple[RecordKind, Callable[..., Any]]:
    """The step that wraps a side's records: by columns for a key column, whole else."""
    if isinstance(key, str):
        return RecordKind.MAP_BATCHES, TaggedBatches(side=side, key=key)
    return RecordKind.MAP, Tagged(side=side, key=key, event_time=event_time)


class Connected:
    """``fn(record, ctx)`` of a connected stream, called with each side's own records."""

    def __init__(self, fn: Callable[[Record, Any], Iterable[Record] | None]) -> None:
        self.fn = fn

    def __call__(self, record: Record, ctx: Any) -> Iterable[Record] | None:
        return self.fn(unwrapped(record, ctx), ctx)


def signed_ms(value: str | float, *, what: str) -> int:
    """A duration that may be negative (``"-5m"``, ``"+1m"``, ``-300``), in ms."""
    if isinstance(value, str) and value.strip().startswith(("-", "+")):
        text = value.strip()
        sign = -1 if text[0] == "-" else 1
        return sign * duration_ms(text[1:], what=what)
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        return -duration_ms(-value, what=what)
    return duration_ms(value, what=what)


class ConnectedTimer:
    """``on_timer(ts, ctx)`` of a connected stream: a timer is the key's, of no side."""

    def __init__(self, fn: Callable[[int, Any], Iterable[Record] | None]) -> None:
        self.fn = fn

    def __call__(self, timestamp: int, ctx: Any) -> Iterable[Record] | None:
        ctx.input = None
        return self.fn(timestamp, ctx)


class Merged:
    """The default joined record: the left record's fields, then the right one's that
    the left one does not have (what the interval join builds as columns)."""

    columnar = True
    """The interval join builds it as columns, not per pair."""

    def __call__(self, left: Record, right: Record) -> Record:
        return {**right, **left}


merged = Merged()


class ConnectedStreams:
    """``a.key_by(k).connect(b.key_by(j))``: ``process`` with both sides' records, or
    ``interval_join``."""

    def __init__(self, keyed: Any) -> None:
        self._keyed = keyed

    def process(self, fn: Callable[[Record, Any], Iterable[Record] | None], *,
                on_timer: Callable[[int, Any], Iterable[Record] | None] | None = None,
                name: str | None = None) -> Any:
        """``fn(record, ctx)`` for the records of both streams; ``ctx.input`` is 0 for
        a record of the first, 1 for one of the second. State (``ctx.value_state``,
        ``ctx.map_state``) and timers are the key's, shared by both; ``on_timer`` as in
        a keyed ``process`` (where ``ctx.input`` is ``None``: a timer is the key's)."""
        if not callable(fn):
            raise PipelineDefinitionError(problem="connect(...).process() needs a function")
        if on_timer is not None and not callable(on_timer):
            raise PipelineDefinitionError(
                problem="connect(...).process(on_timer=...) needs a function of "
                        "(timestamp, ctx)")
        timer = None if on_timer is None else ConnectedTimer(on_timer)
        return self._keyed.process(Connected(fn), on_timer=timer, name=name)

    def _pair_function(self, *, operation: str, fn: JoinFunction | None) -> JoinFunction:
        """What both joins check before they are built: a function of a pair if one is
        given (else ``merged``), and event time, since a join's pairs end by watermark."""
        if fn is not None and not callable(fn):
            raise PipelineDefinitionError(problem=f"{operation}(fn=...) needs a function "
                                                  "of (first, second)")
        if self._keyed._p.watermarks is None:
            raise PipelineDefinitionError(
                problem=f"{operation}() needs event time: give both sources watermarks=")
        return fn or merged

    def interval_join(self, *, lower: str | float, upper: str | float,
                      fn: JoinFunction | None = None, name: str | None = None) -> Any:
        """Pairs of a first-stream record at ``t`` and a second-stream record at ``s``
        of the same key with ``t + lower <= s <= t + upper`` (``lower="-5m"``,
        ``upper="1m"``: the second within five minutes before and one after),
        ``fn(first, second)`` each (by default the first's fields, then the second's it
        lacks); records too late to pair go to ``side_output("late")``."""
        lower_ms = signed_ms(lower, what="interval_join() lower")
        upper_ms = signed_ms(upper, what="interval_join() upper")
        if lower_ms > upper_ms:
            raise PipelineDefinitionError(
                problem=f"interval_join() needs lower <= upper, got {lower!r} > {upper!r}")
        pair = self._pair_function(operation="interval_join", fn=fn)
        keyed = self._keyed
        strategy = keyed._p.watermarks
        return keyed._keyed(KeyedOp(
            kind=KeyedKind.INTERVAL_JOIN, uid=keyed._p.uid("interval_join", name),
            key=keyed._key, fn=pair, bounds=(lower_ms, upper_ms),
            event_time=strategy.column))

    def window_join(self, assigner: WindowAssigner, *, fn: JoinFunction | None = None,
                    name: str | None = None) -> Any:
        """Pairs of a first-stream and a second-stream record of the same key in the
        same event-time window (``windows.tumbling("1m")`` or ``windows.sliding``),
        ``fn(first, second)`` each, emitted when the watermark passes the window's end;
        records too late for every window of theirs go to ``side_output("late")``."""
        if not isinstance(assigner, WindowAssigner):
            raise PipelineDefinitionError(
                problem="window_join() needs windows.tumbling(...) or windows.sliding(...)")
        pair = self._pair_function(operation="window_join", fn=fn)
        keyed = self._keyed
        strategy = keyed._p.watermarks
        return keyed._keyed(KeyedOp(
            kind=KeyedKind.WINDOW_JOIN, uid=keyed._p.uid("window_join", name),
            key=keyed._key, fn=pair, window=assigner, event_time=strategy.column))
