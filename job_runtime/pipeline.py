"""The user API: ``build(p: Pipeline)`` describes a linear dataflow.

A pipeline is a source, a chain of operators and one sink. ``key_by`` starts a
keyed exchange: the records are redistributed by key group so that each key is
handled by exactly one subtask, and the keyed operator after it (``reduce``,
``aggregate`` or ``process``) keeps state per key. The description is rebuilt
in every process by calling the same ``build`` function, so user functions never
need to be pickled.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa

from job_runtime.durations import duration_ms
from job_runtime.errors import PipelineDefinitionError
from job_runtime.records import KeySelector, Record
from job_runtime.sinks.base import Sink
from job_runtime.sources.base import Source
from job_runtime.watermarks import WatermarkStrategy
from job_runtime.windows import SessionWindows, Window, WindowAssigner

AGGREGATES = ("count", "sum", "min", "max", "mean")


class RecordKind(enum.StrEnum):
    """The stateless functions."""

    MAP = "map"
    FLAT_MAP = "flat_map"
    FILTER = "filter"
    MAP_BATCHES = "map_batches"


class KeyedKind(enum.StrEnum):
    """The keyed operators, one operator class each (see ``build_keyed_operator``)."""

    REDUCE = "reduce"
    PROCESS = "process"
    AGGREGATE = "aggregate"
    WINDOW_AGGREGATE = "window_aggregate"
    SESSION_AGGREGATE = "session_aggregate"
    WINDOW_REDUCE = "window_reduce"
    WINDOW_PROCESS = "window_process"


@dataclasses.dataclass(frozen=True)
class RecordOp:
    """A stateless function: ``map``, ``flat_map``, ``filter`` or ``map_batches``."""

    kind: RecordKind
    fn: Callable[..., Any]
    uid: str


@dataclasses.dataclass(frozen=True)
class KeyBy:
    key: str | KeySelector
    uid: str

    @property
    def key_name(self) -> str:
        return self.key if isinstance(self.key, str) else "key"


@dataclasses.dataclass(frozen=True)
class KeyedOp:
    """A keyed, stateful operator: ``reduce``, ``aggregate``, ``process``,
    ``window_aggregate``, ``session_aggregate``, ``window_reduce`` or
    ``window_process``."""

    kind: KeyedKind
    uid: str
    key: KeyBy
    fn: Callable[..., Any] | None = None
    aggregates: tuple[tuple[str, str, str | None], ...] = ()
    window: WindowAssigner | SessionWindows | None = None
    allowed_lateness: int = 0
    """Milliseconds a fired window is kept for late records (each updates its row)."""
    event_time: str | None = None
    """The event-time column (the source's watermark strategy names it)."""
    on_timer: Callable[..., Any] | None = None
    """``process`` only: called as ``on_timer(timestamp, ctx)`` when a timer is due."""

    @property
    def vectorised(self) -> bool:
        """Aggregates computed with numpy over named columns, no Python function per
        record: the stage before it combines, and reads large batches. Not
        ``session_aggregate``: a record's session depends on the key's other records,
        so it takes the records themselves."""
        return self.kind in (KeyedKind.AGGREGATE, KeyedKind.WINDOW_AGGREGATE)


Op = RecordOp | KeyBy | KeyedOp


class Pipeline:
    """What ``build`` receives: the job's arguments and the entry to the dataflow."""

    def __init__(self, *, args: Mapping[str, Any] | None = None, name: str = "job") -> None:
        self.args: dict[str, Any] = dict(args or {})
        self.name = name
        self.source_op: Source | None = None
        self.watermarks: WatermarkStrategy | None = None
        self.ops: list[Op] = []
        self.sink_op: Sink | None = None
        self._tail: object | None = None

    def source(self, source: Source, *, watermarks: WatermarkStrategy | None = None) -> Stream:
        """The job's input; ``watermarks`` (see :mod:`job_runtime.watermarks`) gives its
        records an event time, which windows need."""
        if self.source_op is not None:
            raise PipelineDefinitionError(problem="a pipeline has exactly one source")
        if not isinstance(source, Source):
            raise PipelineDefinitionError(
                problem=f"p.source() needs a source from job_runtime.sources, got "
                        f"{type(source).__name__}")
        if watermarks is not None and not isinstance(watermarks, WatermarkStrategy):
            raise PipelineDefinitionError(
                problem=f"p.source(watermarks=...) needs a strategy from job_runtime.watermarks "
                        f"(e.g. watermarks.bounded_out_of_orderness('ts', max_delay='5s')), got "
                        f"{type(watermarks).__name__}")
        self.source_op = source
        self.watermarks = watermarks
        stream = Stream(self)
        self._tail = stream
        return stream

    def _append(self, owner: object, op: Op) -> None:
        if self.sink_op is not None:
            raise PipelineDefinitionError(problem="nothing may follow the sink")
        if owner is not self._tail:
            raise PipelineDefinitionError(
                problem="pipelines are linear: each stream can be continued only once")
        self.ops.append(op)

    def _uid(self, kind: str, name: str | None) -> str:
        return name or f"{len(self.ops) + 1:02d}-{kind}"

    def validate(self) -> None:
        if self.source_op is None:
            raise PipelineDefinitionError(problem="build() did not call p.source(...)")
        if self.sink_op is None:
            raise PipelineDefinitionError(problem="build() did not end the pipeline with .sink(...)")
        uids = [op.uid for op in self.ops]
        if len(uids) != len(set(uids)):
            raise PipelineDefinitionError(problem=f"operator names must be unique: {uids}")

    @property
    def keyed_ops(self) -> list[KeyedOp]:
        return [op for op in self.ops if isinstance(op, KeyedOp)]


class Stream:
    """A stream of records; each method returns the continued stream."""

    def __init__(self, pipeline: Pipeline) -> None:
        self._p = pipeline

    def _record(self, kind: RecordKind, fn: Callable[..., Any], name: str | None) -> Stream:
        if not callable(fn):
            raise PipelineDefinitionError(problem=f"{kind}() needs a function")
        self._p._append(self, RecordOp(kind=kind, fn=fn, uid=self._p._uid(kind, name)))
        nxt = Stream(self._p)
        self._p._tail = nxt
        return nxt

    def map(self, fn: Callable[[Record], Record], *, name: str | None = None) -> Stream:
        return self._record(RecordKind.MAP, fn, name)

    def flat_map(self, fn: Callable[[Record], Iterable[Record]], *,
                 name: str | None = None) -> Stream:
        return self._record(RecordKind.FLAT_MAP, fn, name)

    def filter(self, fn: Callable[[Record], bool], *, name: str | None = None) -> Stream:
        return self._record(RecordKind.FILTER, fn, name)

    def map_batches(self, fn: Callable[[pa.RecordBatch], pa.RecordBatch | pa.Table], *,
                    name: str | None = None) -> Stream:
        return self._record(RecordKind.MAP_BATCHES, fn, name)

    def window(self, assigner: WindowAssigner | SessionWindows, **_: Any) -> WindowedStream:
        """Windows are per key: ``key_by(...).window(...)``."""
        raise PipelineDefinitionError(
            problem="window() needs key_by() before it: windows hold state per key")

    def key_by(self, key: str | KeySelector) -> KeyedStream:
        if not (isinstance(key, str) or callable(key)):
            raise PipelineDefinitionError(problem="key_by() needs a column name or a function")
        op = KeyBy(key=key, uid=self._p._uid("key_by", None))
        self._p._append(self, op)
        keyed = KeyedStream(self._p, op)
        self._p._tail = keyed
        return keyed

    def sink(self, sink: Sink) -> None:
        if not isinstance(sink, Sink):
            raise PipelineDefinitionError(
                problem=f"sink() needs a sink from job_runtime.sinks, got {type(sink).__name__}")
        if self._p._tail is not self:
            raise PipelineDefinitionError(
                problem="pipelines are linear: each stream can be continued only once")
        if self._p.sink_op is not None:
            raise PipelineDefinitionError(problem="a pipeline has exactly one sink")
        self._p.sink_op = sink


class KeyedStream:
    """A stream partitioned by key; the next operator keeps state per key."""

    def __init__(self, pipeline: Pipeline, key: KeyBy) -> None:
        self._p = pipeline
        self._key = key

    def _keyed(self, op: KeyedOp) -> Stream:
        self._p._append(self, op)
        nxt = Stream(self._p)
        self._p._tail = nxt
        return nxt

    def reduce(self, fn: Callable[[Record, Record], Record], *, name: str | None = None) -> Stream:
        """Combine each record with the key's previous result; emits every update."""
        if not callable(fn):
            raise PipelineDefinitionError(problem="reduce() needs a function")
        return self._keyed(KeyedOp(kind=KeyedKind.REDUCE, uid=self._p._uid("reduce", name),
                                   key=self._key, fn=fn))

    def process(self, fn: Callable[[Record, Any], Iterable[Record] | None], *,
                on_timer: Callable[[int, Any], Iterable[Record] | None] | None = None,
                name: str | None = None) -> Stream:
        """Call ``fn(record, ctx)``: ``ctx.value_state``/``ctx.map_state`` (``ttl=``
        optional) hold per-key state, ``ctx.timers.register_event_time(ts)`` /
        ``register_processing_time(ts)`` ask for ``on_timer(ts, ctx)`` for the key,
        ``ctx.timestamp`` and ``ctx.current_watermark`` are event time (ms) on a
        source with ``watermarks=``. Both functions return the records to emit (or
        ``None``)."""
        if not callable(fn):
            raise PipelineDefinitionError(problem="process() needs a function")
        if on_timer is not None and not callable(on_timer):
            raise PipelineDefinitionError(
                problem="process(on_timer=...) needs a function of (timestamp, ctx)")
        strategy = self._p.watermarks
        return self._keyed(KeyedOp(kind=KeyedKind.PROCESS, uid=self._p._uid("process", name),
                                   key=self._key, fn=fn, on_timer=on_timer,
                                   event_time=None if strategy is None else strategy.column))

    def aggregate(self, *, name: str | None = None, **outputs: tuple[str, str | None] | str
                  ) -> Stream:
        """Vectorised per-key aggregates, e.g. ``aggregate(n="count", total=("sum", "v"))``.

        Emits, after each input batch, the current aggregates of the keys it touched.
        The records are partially aggregated before the keyed exchange (one row per
        key and flush, flushed at the latest every 0.25 s, after 1M records, and
        before every checkpoint barrier), so an input batch here holds the updates of
        many records: a key is emitted once per flush, with the same aggregates.
        """
        if not isinstance(self._key.key, str):
            raise PipelineDefinitionError(problem="aggregate() needs key_by(<column name>)")
        return self._keyed(KeyedOp(kind=KeyedKind.AGGREGATE, uid=self._p._uid("aggregate", name),
                                   key=self._key, aggregates=aggregate_specs(outputs)))

    def window(self, assigner: WindowAssigner | SessionWindows, *,
               allowed_lateness: str | float = 0) -> WindowedStream:
        """Event-time windows per key (``windows.tumbling("1m")``, ``windows.sliding``,
        ``windows.session(gap="30s")``), on a source with ``watermarks=``. A window
        fires when the watermark passes its end; for ``allowed_lateness`` after that, a
        late record updates its row (the row is emitted again); a record later still
        is counted (``cjob_job_late_records_total``) and dropped."""
        if not isinstance(assigner, WindowAssigner | SessionWindows):
            raise PipelineDefinitionError(
                problem=f"window() needs an assigner from job_runtime.windows (e.g. "
                        f"windows.tumbling('1m'), windows.session(gap='30s')), got "
                        f"{type(assigner).__name__}")
        if self._p.watermarks is None:
            raise PipelineDefinitionError(
                problem="window() needs event time: give the source watermarks, e.g. "
                        "p.source(src, watermarks=watermarks.bounded_out_of_orderness("
                        "'ts', max_delay='5s'))")
        if not isinstance(self._key.key, str):
            raise PipelineDefinitionError(problem="window() needs key_by(<column name>)")
        lateness = duration_ms(allowed_lateness, what="window() allowed_lateness")
        return WindowedStream(self, assigner=assigner, allowed_lateness=lateness)


class WindowedStream:
    """A keyed stream cut into event-time windows; ``aggregate``, ``reduce`` or
    ``process`` computes per window."""

    def __init__(self, keyed: KeyedStream, *, assigner: WindowAssigner | SessionWindows,
                 allowed_lateness: int) -> None:
        self._keyed = keyed
        self._assigner = assigner
        self._allowed_lateness = allowed_lateness

    def aggregate(self, *, name: str | None = None, **outputs: tuple[str, str | None] | str
                  ) -> Stream:
        """Per key and window, e.g. ``aggregate(n="count", total=("sum", "amount"))``:
        rows of the key, ``window_start``, ``window_end`` (the event-time column's
        type) and the outputs, one per window when it fires (per session, with
        ``windows.session``: its first record's time and its last one's plus the
        gap)."""
        keyed = self._keyed
        strategy = keyed._p.watermarks
        assert strategy is not None
        specs = aggregate_specs(outputs)
        taken = {str(keyed._key.key), "window_start", "window_end"}
        clash = [out for out, _, _ in specs if out in taken]
        if clash:
            raise PipelineDefinitionError(
                problem=f"window aggregate outputs may not be named {', '.join(clash)}: "
                        f"those columns hold the key and the window's bounds")
        session = isinstance(self._assigner, SessionWindows)
        return keyed._keyed(KeyedOp(
            kind=KeyedKind.SESSION_AGGREGATE if session else KeyedKind.WINDOW_AGGREGATE,
            uid=keyed._p._uid("session" if session else "window", name), key=keyed._key,
            aggregates=specs, window=self._assigner, allowed_lateness=self._allowed_lateness,
            event_time=strategy.column))


    def reduce(self, fn: Callable[[Record, Record], Record], *, name: str | None = None
               ) -> Stream:
        """Per key and window, ``fn(accumulated, record) -> accumulated`` (a window's
        first record is its first accumulated value); when the window fires, one
        record: the accumulated one with ``window_start`` and ``window_end`` (ms for
        an integer event-time column, UTC ``datetime`` for a timestamp one). Tumbling
        and sliding windows only, record by record (no combiner)."""
        return self._function("reduce", fn, name)

    def process(self, fn: Callable[[Any, Window, list[Record]], Iterable[Record] | None], *,
                name: str | None = None) -> Stream:
        """When a window fires, ``fn(key, window, records)``: ``window`` a
        :class:`~job_runtime.windows.Window` (``start``, ``end`` in ms), ``records``
        the key's records of the window in the order they arrived; ``fn`` returns the
        records to emit (or ``None``). Tumbling and sliding windows only."""
        return self._function("process", fn, name)

    def _function(self, kind: str, fn: Callable[..., Any], name: str | None) -> Stream:
        """``reduce`` and ``process`` alike: each keeps the key's records (or their
        reduction) per window in keyed state and runs ``fn`` in Python. Not on
        sessions yet: a key's sessions merge as records come, and only the session
        operator of ``aggregate`` knows how to merge what they hold."""
        if not callable(fn):
            raise PipelineDefinitionError(problem=f"window(...).{kind}() needs a function")
        if isinstance(self._assigner, SessionWindows):
            raise PipelineDefinitionError(
                problem=f"session windows take aggregate() only for now, not {kind}(); "
                        f"use windows.tumbling or windows.sliding")
        keyed = self._keyed
        strategy = keyed._p.watermarks
        assert strategy is not None
        return keyed._keyed(KeyedOp(
            kind=KeyedKind(f"window_{kind}"), uid=keyed._p._uid(f"window_{kind}", name), key=keyed._key,
            fn=fn, window=self._assigner, allowed_lateness=self._allowed_lateness,
            event_time=strategy.column))


def aggregate_specs(outputs: Mapping[str, tuple[str, str | None] | str]
                    ) -> tuple[tuple[str, str, str | None], ...]:
    """``out=("sum", "v")`` / ``out="count"`` as ``(out, func, column)``, checked."""
    specs: list[tuple[str, str, str | None]] = []
    for out, spec in outputs.items():
        func, column = (spec, None) if isinstance(spec, str) else spec
        if func not in AGGREGATES:
            raise PipelineDefinitionError(
                problem=f"aggregate {out}: unknown function {func!r}; "
                        f"use one of {', '.join(AGGREGATES)}")
        if func != "count" and not column:
            raise PipelineDefinitionError(problem=f"aggregate {out}: {func} needs a column")
        specs.append((out, func, column))
    if not specs:
        raise PipelineDefinitionError(problem="aggregate() needs at least one output")
    return tuple(specs)
