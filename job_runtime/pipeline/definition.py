"""The pipeline as defined: what ``build`` described, read by the execution, and
the checks of what it was given (sinks and their names, aggregates, the whole at
:meth:`~PipelineDefinition.validate`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from job_runtime.errors import PipelineDefinitionError
from job_runtime.pipeline.ops import Branch, KeyedKind, KeyedOp, Op, SourceInput
from job_runtime.pipeline.table import Table
from job_runtime.sinks.sink_contract import MAIN_SINK, Sink
from job_runtime.sources.source_contract import Source
from job_runtime.sources.union import UnionSource
from job_runtime.watermarks import WatermarkStrategy

AGGREGATES = ("count", "sum", "min", "max", "mean")
SINK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""A sink's name keys its pending transactions in checkpoints and names its staging
folder: letters, digits, '.', '_' and '-'."""


class PipelineDefinition:
    """The dataflow ``build`` describes, as the execution reads it: the job's arguments,
    its inputs, operators, sinks and side outputs, and the checks of the whole
    (:meth:`validate`). The streams add to it; its subclass
    :class:`~job_runtime.pipeline.entry.Pipeline` is what ``build`` receives."""

    def __init__(self, *, args: Mapping[str, Any] | None = None, name: str = "job") -> None:
        self.args: dict[str, Any] = dict(args or {})
        self.name = name
        self.source_op: Source | None = None
        self.watermarks: WatermarkStrategy | None = None
        self.inputs: list[SourceInput] = []
        """Every source in the order ``source()`` was called; more than one only with a
        ``union``, whose record functions before it are each input's ``ops``."""
        self.ops: list[Op] = []
        self.sink_op: Sink | None = None
        self.sink_name = MAIN_SINK
        self.branches: list[Branch] = []
        self.tail: object | None = None
        """The stream that may be continued (each is continued once)."""
        self.tables: list[Table] = []
        """The tables of ``p.table(...)``, each read whole by every subtask that
        enriches with it."""

    def job_source(self) -> Source:
        """What the source task reads: the one source, or the union of the inputs."""
        assert self.source_op is not None
        if len(self.inputs) == 1:
            return self.source_op
        return UnionSource([entry.source for entry in self.inputs])

    def prepared_sources(self) -> list[Source]:
        """Every source the driver prepares before the stage starts: the job's input
        and each table's source."""
        return [self.job_source(), *(t.source for t in self.tables)]

    def append(self, owner: object, op: Op) -> None:
        if self.sink_op is not None:
            raise PipelineDefinitionError(problem="nothing may follow the sink")
        if owner is not self.tail:
            raise PipelineDefinitionError(
                problem="pipelines are linear: each stream can be continued only once")
        self.ops.append(op)

    def uid(self, kind: str, name: str | None) -> str:
        if name:
            return name
        before = sum(len(entry.ops) for entry in self.inputs)
        return f"{before + len(self.ops) + 1:02d}-{kind}"

    def validate(self) -> None:
        if self.source_op is None:
            raise PipelineDefinitionError(problem="build() did not call p.source(...)")
        if self.sink_op is None:
            raise PipelineDefinitionError(problem="build() did not end the pipeline with .sink(...)")
        for entry in self.inputs[1:]:
            if not entry.unioned:
                raise PipelineDefinitionError(
                    problem=f"the source {entry.source.name!r} is never read: join it to "
                            f"the first with union(), or connect() its keyed stream")
        self._check_staged_names()
        used = {id(op.table) for op in self.ops
                if isinstance(op, KeyedOp) and op.kind is KeyedKind.ENRICH}
        for made in self.tables:
            if id(made) not in used:
                raise PipelineDefinitionError(
                    problem=f"the table {made.name!r} is never read: enrich a stream with "
                            f"it, stream.enrich(table, on=<column>)")
        uids = [op.uid for op in self.ops] + [op.uid for b in self.branches for op in b.ops] \
            + [op.uid for entry in self.inputs for op in entry.ops]
        if len(uids) != len(set(uids)):
            raise PipelineDefinitionError(problem=f"operator names must be unique: {uids}")
        for branch in self.branches:
            if branch.sink is None:
                raise PipelineDefinitionError(
                    problem=f"the side output {branch.tag!r} of {branch.origin.uid} does not "
                            f"end with .sink(...)")
        names = [name for name, _ in self.sinks()]
        if len(names) != len(set(names)):
            raise PipelineDefinitionError(
                problem=f"sink names must be unique: {', '.join(names)} (give each "
                        f".sink(..., name=...) its own)")

    def _check_staged_names(self) -> None:
        """Two inputs staged under one name would read one copy: the second input's
        data would never be read, and the first's read twice."""
        seen: dict[str, Source] = {}
        for source in [entry.source for entry in self.inputs] + [t.source for t in self.tables]:
            name = source.staged_name
            if name is None:
                continue
            other = seen.setdefault(name, source)
            if other is not source:
                raise PipelineDefinitionError(
                    problem=f"two {source.name} inputs are staged under the name "
                            f"{name!r}: give each its own name=..., e.g. "
                            f"sources.{source.name}(..., name='orders')")

    def sinks(self) -> list[tuple[str, Sink]]:
        """Every sink of the job by name, the main stream's first."""
        found = [] if self.sink_op is None else [(self.sink_name, self.sink_op)]
        return found + [(b.sink_name, b.sink) for b in self.branches if b.sink is not None]

    @property
    def keyed_ops(self) -> list[KeyedOp]:
        return [op for op in self.ops if isinstance(op, KeyedOp)]


def check_sink(sink: object, *, name: object) -> None:
    if not isinstance(sink, Sink):
        raise PipelineDefinitionError(
            problem=f"sink() needs a sink from job_runtime.sinks, got {type(sink).__name__}")
    if not isinstance(name, str) or not SINK_NAME.fullmatch(name):
        raise PipelineDefinitionError(
            problem=f"sink(name=...) must be 1-100 letters, digits, '.', '_' or '-', "
                    f"starting with a letter or digit; got {name!r}")


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
