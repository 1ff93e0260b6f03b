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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa

from job_runtime.errors import PipelineDefinitionError
from job_runtime.records import KeySelector, Record
from job_runtime.sinks.base import Sink
from job_runtime.sources.base import Source

AGGREGATES = ("count", "sum", "min", "max", "mean")


@dataclasses.dataclass(frozen=True)
class RecordOp:
    """A stateless function: ``map``, ``flat_map``, ``filter`` or ``map_batches``."""

    kind: str
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
    """A keyed, stateful operator: ``reduce``, ``aggregate`` or ``process``."""

    kind: str
    uid: str
    key: KeyBy
    fn: Callable[..., Any] | None = None
    aggregates: tuple[tuple[str, str, str | None], ...] = ()


Op = RecordOp | KeyBy | KeyedOp


class Pipeline:
    """What ``build`` receives: the job's arguments and the entry to the dataflow."""

    def __init__(self, *, args: Mapping[str, Any] | None = None, name: str = "job") -> None:
        self.args: dict[str, Any] = dict(args or {})
        self.name = name
        self.source_op: Source | None = None
        self.ops: list[Op] = []
        self.sink_op: Sink | None = None
        self._tail: object | None = None

    def source(self, source: Source) -> Stream:
        if self.source_op is not None:
            raise PipelineDefinitionError(problem="a pipeline has exactly one source")
        if not isinstance(source, Source):
            raise PipelineDefinitionError(
                problem=f"p.source() needs a source from job_runtime.sources, got "
                        f"{type(source).__name__}")
        self.source_op = source
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

    def _record(self, kind: str, fn: Callable[..., Any], name: str | None) -> Stream:
        if not callable(fn):
            raise PipelineDefinitionError(problem=f"{kind}() needs a function")
        self._p._append(self, RecordOp(kind=kind, fn=fn, uid=self._p._uid(kind, name)))
        nxt = Stream(self._p)
        self._p._tail = nxt
        return nxt

    def map(self, fn: Callable[[Record], Record], *, name: str | None = None) -> Stream:
        return self._record("map", fn, name)

    def flat_map(self, fn: Callable[[Record], Iterable[Record]], *,
                 name: str | None = None) -> Stream:
        return self._record("flat_map", fn, name)

    def filter(self, fn: Callable[[Record], bool], *, name: str | None = None) -> Stream:
        return self._record("filter", fn, name)

    def map_batches(self, fn: Callable[[pa.RecordBatch], pa.RecordBatch | pa.Table], *,
                    name: str | None = None) -> Stream:
        return self._record("map_batches", fn, name)

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
        return self._keyed(KeyedOp(kind="reduce", uid=self._p._uid("reduce", name),
                                   key=self._key, fn=fn))

    def process(self, fn: Callable[[Record, Any], Iterable[Record] | None], *,
                name: str | None = None) -> Stream:
        """Call ``fn(record, ctx)``; ``ctx.value_state``/``ctx.map_state`` hold per-key state."""
        if not callable(fn):
            raise PipelineDefinitionError(problem="process() needs a function")
        return self._keyed(KeyedOp(kind="process", uid=self._p._uid("process", name),
                                   key=self._key, fn=fn))

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
        return self._keyed(KeyedOp(kind="aggregate", uid=self._p._uid("aggregate", name),
                                   key=self._key, aggregates=tuple(specs)))
