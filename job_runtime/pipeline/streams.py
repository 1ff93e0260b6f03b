"""The streams ``build`` continues: each method checks its arguments, adds an
operator to the :class:`~job_runtime.pipeline.definition.PipelineDefinition` and
returns the stream that continues it.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

import pyarrow as pa

from job_runtime.durations import duration_ms
from job_runtime.errors import PipelineDefinitionError
from job_runtime.pipeline.connect import KEY, ConnectedStreams, tagging
from job_runtime.pipeline.connect import LATE as JOIN_LATE
from job_runtime.pipeline.definition import PipelineDefinition, aggregate_specs, check_sink
from job_runtime.pipeline.ops import (
    WINDOW_KINDS,
    Branch,
    KeyBy,
    KeyedKind,
    KeyedOp,
    RecordKind,
    RecordOp,
    SourceInput,
)
from job_runtime.pipeline.table import EnrichFunction, Table, check_enrich, enrich_function
from job_runtime.records import KeySelector, Record
from job_runtime.sinks.sink_contract import MAIN_SINK, Sink
from job_runtime.windows import LATE_DATA, SessionWindows, Window, WindowAssigner

Continued = TypeVar("Continued", bound="Stream | SideStream")


class RecordFunctions(abc.ABC, Generic[Continued]):
    """``map``, ``flat_map``, ``filter`` and ``map_batches``: the same four on a stream
    and on a side output, each appending a :class:`RecordOp` where the stream keeps
    its functions (``_record``) and returning the continued stream."""

    @abc.abstractmethod
    def _record(self, kind: RecordKind, fn: Callable[..., Any], name: str | None
                ) -> Continued: ...

    def map(self, fn: Callable[[Record], Record], *, name: str | None = None) -> Continued:
        return self._record(RecordKind.MAP, fn, name)

    def flat_map(self, fn: Callable[[Record], Iterable[Record]], *,
                 name: str | None = None) -> Continued:
        return self._record(RecordKind.FLAT_MAP, fn, name)

    def filter(self, fn: Callable[[Record], bool], *, name: str | None = None) -> Continued:
        return self._record(RecordKind.FILTER, fn, name)

    def map_batches(self, fn: Callable[[pa.RecordBatch], pa.RecordBatch | pa.Table], *,
                    name: str | None = None) -> Continued:
        return self._record(RecordKind.MAP_BATCHES, fn, name)


class Stream(RecordFunctions["Stream"]):
    """A stream of records; each method returns the continued stream."""

    def __init__(self, pipeline: PipelineDefinition, *, origin: KeyedOp | None = None,
                 input_: SourceInput | None = None) -> None:
        self._p = pipeline
        self._origin = origin
        """The keyed operator whose main output this is (its side outputs branch here)."""
        self._input = input_
        """A source after the first, until ``union`` joins it: its record functions
        go to its own chain."""

    def union(self, *others: Stream) -> Stream:
        """The records of this stream and of ``others``, each a stream of a
        ``p.source(...)`` (with record functions of its own, but no ``key_by``), in no
        particular order between them. With event time, every source has watermarks
        on the same column; the union's watermark is the minimum over all their
        splits."""
        return _union(self._p, self, others)

    def _record(self, kind: RecordKind, fn: Callable[..., Any], name: str | None) -> Stream:
        if not callable(fn):
            raise PipelineDefinitionError(problem=f"{kind}() needs a function")
        op = RecordOp(kind=kind, fn=fn, uid=self._p.uid(kind, name))
        if self._input is not None:
            return self._input_op(op)
        self._p.append(self, op)
        nxt = Stream(self._p)
        self._p.tail = nxt
        return nxt

    def _input_op(self, op: RecordOp) -> Stream:
        entry = self._input
        assert entry is not None
        if entry.unioned or entry.tail is not self:
            raise PipelineDefinitionError(
                problem="each stream can be continued only once (and a source's stream "
                        "not after its union())")
        entry.ops.append(op)
        entry.tail = Stream(self._p, input_=entry)
        return entry.tail

    def _joined(self, method: str) -> None:
        if self._input is not None:
            raise PipelineDefinitionError(
                problem=f"{method}() on the stream of a second source: join it to the first "
                        f"with union() first, e.g. p.source(a).union(p.source(b)).{method}(...)")

    def window(self, assigner: WindowAssigner | SessionWindows, **_: Any) -> WindowedStream:
        """Windows are per key: ``key_by(...).window(...)``."""
        raise PipelineDefinitionError(
            problem="window() needs key_by() before it: windows hold state per key")

    def key_by(self, key: str | Sequence[str] | KeySelector) -> KeyedStream:
        """Partition by a column, by several columns (``key_by(["country", "device"])``:
        the key is the tuple of their values), or by a function ``fn(record) -> key``.
        On a second source's stream, only to ``connect`` it to the first one's."""
        spec: str | tuple[str, ...] | KeySelector
        if isinstance(key, list | tuple):
            spec = tuple(key)
            if not spec or not all(isinstance(c, str) and c for c in spec):
                raise PipelineDefinitionError(
                    problem=f"key_by() with several columns needs their names, got {key!r}")
            if len(set(spec)) < len(spec):
                raise PipelineDefinitionError(
                    problem=f"key_by() names a column twice: {list(spec)}")
            if len(spec) == 1:
                spec = spec[0]
        elif isinstance(key, str) or callable(key):
            spec = key
        else:
            raise PipelineDefinitionError(
                problem="key_by() needs a column name, a list of column names or a function")
        if self._input is not None:
            # A second source's stream: keyed only to be connected (the first source's
            # keyed stream's connect() wraps it into the shared exchange).
            return KeyedStream(self._p, KeyBy(key=spec, uid=""), stream=self, pending=True)
        op = KeyBy(key=spec, uid=self._p.uid("key_by", None))
        self._p.append(self, op)
        keyed = KeyedStream(self._p, op, stream=self)
        self._p.tail = keyed
        return keyed

    def enrich(self, table: Table, *, on: str, fn: EnrichFunction | None = None,
               how: str = "left", name: str | None = None) -> Stream:
        """Each record with the row of ``table`` (from ``p.table(...)``) whose key is
        the record's ``on`` column: by default the record's fields, then the row's it
        lacks, a record without a row kept as it is (``how="left"``) or dropped
        (``"inner"``), one Arrow hash join per batch; or ``fn(record, row)`` per
        record (``row`` ``None`` when there is none; return ``None`` to drop it).
        Every subtask keeps the whole table, restored from checkpoints with the
        stream; records are partitioned by ``on`` first (``key_by(...).enrich(...)``
        keeps a key of your own)."""
        check_enrich(table, on=on, fn=fn, how=how)
        return self.key_by(on).enrich(table, on=on, fn=fn, how=how, name=name)

    def side_output(self, tag: str) -> SideStream:
        """The records the keyed operator before this stream routed aside under ``tag``:
        ``ctx.output(tag, record)`` of a ``process`` function, or
        ``windows.late_data()`` of a window. The side stream takes record functions
        and ends in a sink of its own, exactly-once with the main one."""
        origin = self._origin
        if origin is None:
            raise PipelineDefinitionError(
                problem="side_output() reads what a keyed operator routed aside: call it on "
                        "the stream that process() or a window's aggregate/reduce/process "
                        "returns")
        if not isinstance(tag, str) or not tag:
            raise PipelineDefinitionError(problem="side_output() needs a tag (a non-empty "
                                                  "string, or windows.late_data())")
        if origin.kind in (KeyedKind.INTERVAL_JOIN, KeyedKind.WINDOW_JOIN):
            if tag != JOIN_LATE:
                raise PipelineDefinitionError(
                    problem=f"{origin.uid} is a join: its only side output is "
                            f"{JOIN_LATE!r} (records too late to pair), not {tag!r}")
            return self._branch(origin, tag)
        windowed = origin.kind in WINDOW_KINDS
        if tag == LATE_DATA and not windowed:
            raise PipelineDefinitionError(
                problem=f"{origin.uid} is not a window: only windows route late data aside")
        if windowed and tag != LATE_DATA:
            raise PipelineDefinitionError(
                problem=f"{origin.uid} is a window: its only side output is "
                        f"windows.late_data(), not {tag!r}")
        if origin.kind not in WINDOW_KINDS and origin.kind != KeyedKind.PROCESS:
            raise PipelineDefinitionError(
                problem=f"{origin.kind}() has no side outputs: route records aside in "
                        f"process() with ctx.output(tag, record)")
        return self._branch(origin, tag)

    def _branch(self, origin: KeyedOp, tag: str) -> SideStream:
        if any(b.origin is origin and b.tag == tag for b in self._p.branches):
            raise PipelineDefinitionError(
                problem=f"the side output {tag!r} of {origin.uid} is read twice: read it once")
        branch = Branch(origin=origin, tag=tag)
        self._p.branches.append(branch)
        return SideStream(self._p, branch)

    def sink(self, sink: Sink, *, name: str = MAIN_SINK) -> None:
        """End the pipeline in ``sink``; ``name`` identifies its pending transactions
        in checkpoints (give one only when a side output's sink takes the default)."""
        self._joined("sink")
        check_sink(sink, name=name)
        if self._p.tail is not self:
            raise PipelineDefinitionError(
                problem="each stream can be continued only once (read a keyed operator's "
                        "other records with side_output())")
        if self._p.sink_op is not None:
            raise PipelineDefinitionError(problem="the main stream has one sink; side "
                                                  "outputs have their own")
        self._p.sink_op = sink
        self._p.sink_name = name


class KeyedStream:
    """A stream partitioned by key; the next operator keeps state per key."""

    def __init__(self, pipeline: PipelineDefinition, key: KeyBy, *,
                 stream: Stream | None = None, pending: bool = False) -> None:
        self._p = pipeline
        self._key = key
        self._stream = stream
        """The stream ``key_by`` was called on (``connect`` continues it instead)."""
        self._pending = pending
        """A second source's keyed stream, which only ``connect`` may take."""

    def _main(self, method: str) -> None:
        if self._pending:
            raise PipelineDefinitionError(
                problem=f"{method}() on the keyed stream of a second source: connect it to "
                        f"the first one's, p.source(a).key_by(k).connect(p.source(b)"
                        f".key_by(j)).{method}(...), or union the sources before key_by")

    def connect(self, other: KeyedStream) -> ConnectedStreams:
        """This keyed stream and ``other`` (a second source's, keyed by a key of the same
        values) as one: ``process(fn)`` sees the records of both (``ctx.input`` says
        which) with the key's state and timers shared, ``interval_join`` pairs them by
        time. See :mod:`job_runtime.pipeline.connect`."""
        self._main("connect")
        if not isinstance(other, KeyedStream) or other._p is not self._p:
            raise PipelineDefinitionError(
                problem="connect() takes another source's keyed stream of this pipeline: "
                        "p.source(a).key_by(k).connect(p.source(b).key_by(j))")
        if not other._pending:
            raise PipelineDefinitionError(
                problem="connect() takes a second source's keyed stream (the first "
                        "source's stream is this one)")
        p = self._p
        if p.tail is not self or not p.ops or p.ops[-1] is not self._key \
                or any(not isinstance(op, RecordOp) for op in p.ops[:-1]):
            raise PipelineDefinitionError(
                problem="connect() joins the first source's stream right after its first "
                        "key_by")
        assert self._stream is not None and other._stream is not None
        p.ops.pop()  # the key_by becomes the connected stream's own, after the union
        p.tail = self._stream
        column = p.watermarks.column if p.watermarks is not None else None
        kind, tag = tagging(side=0, key=self._key.key, event_time=column)
        mine = self._stream._record(kind, tag, p.uid("connect", None))
        kind, tag = tagging(side=1, key=other._key.key, event_time=column)
        theirs = other._stream._record(kind, tag, p.uid("connect", None))
        return ConnectedStreams(mine.union(theirs).key_by(KEY))

    def _keyed(self, op: KeyedOp) -> Stream:
        self._main(str(op.kind))
        self._p.append(self, op)
        nxt = Stream(self._p, origin=op)
        self._p.tail = nxt
        return nxt

    def reduce(self, fn: Callable[[Record, Record], Record], *, name: str | None = None) -> Stream:
        """Combine each record with the key's previous result; emits every update."""
        if not callable(fn):
            raise PipelineDefinitionError(problem="reduce() needs a function")
        return self._keyed(KeyedOp(kind=KeyedKind.REDUCE, uid=self._p.uid("reduce", name),
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
        return self._keyed(KeyedOp(kind=KeyedKind.PROCESS, uid=self._p.uid("process", name),
                                   key=self._key, fn=fn, on_timer=on_timer,
                                   event_time=None if strategy is None else strategy.column))

    def enrich(self, table: Table, *, on: str, fn: EnrichFunction | None = None,
               how: str = "left", name: str | None = None) -> Stream:
        """``Stream.enrich`` on this stream's partitioning (see there)."""
        check_enrich(table, on=on, fn=fn, how=how)
        if not any(t is table for t in self._p.tables):
            raise PipelineDefinitionError(
                problem="enrich() takes a table of this pipeline's p.table(...)")
        return self._keyed(KeyedOp(kind=KeyedKind.ENRICH, uid=self._p.uid("enrich", name),
                                   key=self._key, fn=enrich_function(fn, how=how),
                                   table=table, lookup=on))

    def aggregate(self, *, name: str | None = None, **outputs: tuple[str, str | None] | str
                  ) -> Stream:
        """Vectorised per-key aggregates, e.g. ``aggregate(n="count", total=("sum", "v"))``.

        Emits, after each input batch, the current aggregates of the keys it touched.
        The records are partially aggregated before the keyed exchange (one row per
        key and flush, flushed at the latest every 0.25 s, after 1M records, and
        before every checkpoint barrier), so an input batch here holds the updates of
        many records: a key is emitted once per flush, with the same aggregates.
        """
        if self._key.columns is None:
            raise PipelineDefinitionError(
                problem="aggregate() needs key_by(<column name>) or key_by([<columns>])")
        return self._keyed(KeyedOp(kind=KeyedKind.AGGREGATE, uid=self._p.uid("aggregate", name),
                                   key=self._key, aggregates=aggregate_specs(outputs)))

    def window(self, assigner: WindowAssigner | SessionWindows, *,
               allowed_lateness: str | float = 0) -> WindowedStream:
        """Event-time windows per key (``windows.tumbling("1m")``, ``windows.sliding``,
        ``windows.session(gap="30s")``), on a source with ``watermarks=``. A window
        fires when the watermark passes its end; for ``allowed_lateness`` after that, a
        late record updates its row (the row is emitted again); a record later still
        is counted (``cjob_job_late_records_total``) and dropped."""
        self._main("window")
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
        if self._key.columns is None:
            raise PipelineDefinitionError(
                problem="window() needs key_by(<column name>) or key_by([<columns>])")
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
        taken = {*(keyed._key.columns or ()), "window_start", "window_end"}
        clash = [out for out, _, _ in specs if out in taken]
        if clash:
            raise PipelineDefinitionError(
                problem=f"window aggregate outputs may not be named {', '.join(clash)}: "
                        f"those columns hold the key and the window's bounds")
        session = isinstance(self._assigner, SessionWindows)
        return keyed._keyed(KeyedOp(
            kind=KeyedKind.SESSION_AGGREGATE if session else KeyedKind.WINDOW_AGGREGATE,
            uid=keyed._p.uid("session" if session else "window", name), key=keyed._key,
            aggregates=specs, window=self._assigner, allowed_lateness=self._allowed_lateness,
            event_time=strategy.column))


    def reduce(self, fn: Callable[[Record, Record], Record], *, name: str | None = None
               ) -> Stream:
        """Per key and window, ``fn(accumulated, record) -> accumulated`` (a window's
        first record is its first accumulated value); when the window fires, one
        record: the accumulated one with ``window_start`` and ``window_end`` (ms for
        an integer event-time column, UTC ``datetime`` for a timestamp one). Record by
        record (no combiner). Sessions that merge are reduced together in no
        particular order: ``fn`` must not depend on the order of its records."""
        return self._function("reduce", fn, name)

    def process(self, fn: Callable[[Any, Window, list[Record]], Iterable[Record] | None], *,
                name: str | None = None) -> Stream:
        """When a window fires, ``fn(key, window, records)``: ``window`` a
        :class:`~job_runtime.windows.Window` (``start``, ``end`` in ms), ``records``
        the key's records of the window in the order they arrived (of a session: in
        event-time order); ``fn`` returns the records to emit (or ``None``)."""
        return self._function("process", fn, name)

    def _function(self, kind: str, fn: Callable[..., Any], name: str | None) -> Stream:
        """``reduce`` and ``process`` alike: each keeps the key's records (or their
        reduction) per window in keyed state and runs ``fn`` in Python."""
        if not callable(fn):
            raise PipelineDefinitionError(problem=f"window(...).{kind}() needs a function")
        keyed = self._keyed
        strategy = keyed._p.watermarks
        assert strategy is not None
        family = "session" if isinstance(self._assigner, SessionWindows) else "window"
        return keyed._keyed(KeyedOp(
            kind=KeyedKind(f"{family}_{kind}"), uid=keyed._p.uid(f"{family}_{kind}", name),
            key=keyed._key,
            fn=fn, window=self._assigner, allowed_lateness=self._allowed_lateness,
            event_time=strategy.column))


class SideStream(RecordFunctions["SideStream"]):
    """A side output of a keyed operator: record functions, then a sink."""

    def __init__(self, pipeline: PipelineDefinition, branch: Branch) -> None:
        self._p = pipeline
        self._branch = branch

    def _record(self, kind: RecordKind, fn: Callable[..., Any], name: str | None
                ) -> SideStream:
        branch = self._branch
        if not callable(fn):
            raise PipelineDefinitionError(problem=f"{kind}() needs a function")
        if branch.sink is not None:
            raise PipelineDefinitionError(problem="nothing may follow the sink")
        uid = name or f"{branch.origin.uid}.{branch.tag}.{len(branch.ops) + 1:02d}-{kind}"
        branch.ops.append(RecordOp(kind=kind, fn=fn, uid=uid))
        return self

    def key_by(self, key: str | KeySelector) -> KeyedStream:
        """Not on a side output yet: it runs in its operator's task, with no exchange."""
        raise PipelineDefinitionError(
            problem=f"key_by() on the side output {self._branch.tag!r} is not supported: a "
                    f"side output takes map, flat_map, filter, map_batches and a sink")

    def sink(self, sink: Sink, *, name: str | None = None) -> None:
        """End the side output in ``sink``; ``name`` (default ``sink-<tag>``) identifies
        its pending transactions in checkpoints, so keep it when the job changes."""
        branch = self._branch
        name = f"sink-{branch.tag}" if name is None else name
        check_sink(sink, name=name)
        if branch.sink is not None:
            raise PipelineDefinitionError(
                problem=f"the side output {branch.tag!r} already ends in a sink")
        branch.sink = sink
        branch.sink_name = name


def _union(p: PipelineDefinition, first: Stream, others: tuple[Stream, ...]) -> Stream:
    """``first.union(*others)``: the inputs joined into one stream, their record
    functions so far each input's own."""
    streams = (first, *others)
    if not others:
        raise PipelineDefinitionError(problem="union() needs at least one other stream")
    if any(isinstance(stream, KeyedStream) for stream in others):
        raise PipelineDefinitionError(
            problem="union() joins streams before their key_by: key_by() on the stream of "
                    "a second source is for connect(), p.source(a).key_by(k).connect("
                    "p.source(b).key_by(j))")
    for stream in streams:
        if not isinstance(stream, Stream) or stream._p is not p:
            raise PipelineDefinitionError(
                problem="union() joins streams of this pipeline's p.source(...)")
    mains = [s for s in streams if s._input is None]
    if len(mains) != 1 or mains[0] is not p.tail:
        raise PipelineDefinitionError(
            problem="union() joins each source's stream once, before any key_by: "
                    "p.source(a).union(p.source(b), ...)")
    if any(not isinstance(op, RecordOp) for op in p.ops):
        raise PipelineDefinitionError(problem="union() comes before any key_by")
    if p.inputs[0].unioned:
        # The functions after the first union apply to every input: they are not
        # the first input's own, which a second union would take them for.
        raise PipelineDefinitionError(
            problem="union() joins all the sources at once: p.source(a).union("
                    "p.source(b), p.source(c))")
    joined = [s._input for s in streams if s._input is not None]
    if (len({id(entry) for entry in joined}) != len(joined)
            or any(e.unioned or s is not e.tail for s, e in
                   ((s, s._input) for s in streams if s._input is not None))):
        raise PipelineDefinitionError(
            problem="union() joins each source's stream once, at its end")
    strategies = [entry.watermarks for entry in (p.inputs[0], *joined)]
    if any(s is None for s in strategies) and any(s is not None for s in strategies):
        raise PipelineDefinitionError(
            problem="union() joins sources that all have watermarks= or none of them: "
                    "windows need event time from every input")
    columns = {s.column for s in strategies if s is not None}
    if len(columns) > 1:
        raise PipelineDefinitionError(
            problem=f"union() joins sources whose event time is one column; their "
                    f"watermarks name {', '.join(sorted(columns))}")
    # The record functions so far are the first input's own.
    p.inputs[0].ops = [op for op in p.ops if isinstance(op, RecordOp)]
    p.inputs[0].unioned = True
    p.ops = []
    for entry in joined:
        entry.unioned = True
    stream = Stream(p)
    p.tail = stream
    return stream
