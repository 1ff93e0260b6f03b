"""Cutting a pipeline into stages at every ``key_by``.

Stage 0 holds the source and the record functions up to the first ``key_by``;
every further stage starts with a keyed operator. Each stage runs as one task in
each of the P subtasks, and between two stages every subtask sends to every
subtask (the keyed exchange). A keyed operator's side outputs (branches) run in
its stage's task: their record functions and sinks need no exchange.
"""

from __future__ import annotations

import dataclasses

from job_runtime.errors import PipelineDefinitionError
from job_runtime.pipeline import (
    Branch,
    KeyBy,
    KeyedOp,
    Pipeline,
    RecordKind,
    RecordOp,
)
from job_runtime.sources.source_contract import RECORD_BATCH_SIZE
from job_runtime.watermarks import WatermarkStrategy

VECTORISED_BATCH_SIZE = 65536
"""Rows per source batch when only Arrow and numpy touch the records
(``map_batches``, ``aggregate``): a batch costs about a millisecond, and the
fixed cost of each (the source's read, the task loop, the chain) is paid eight
times less often than at :data:`RECORD_BATCH_SIZE`."""


@dataclasses.dataclass(kw_only=True)
class StagePlan:
    index: int
    keyed: KeyedOp | None = None
    chain: list[RecordOp] = dataclasses.field(default_factory=list)
    out_key: KeyBy | None = None
    combine: KeyedOp | None = None
    """The next stage's ``aggregate``, whose partial aggregates this stage computes
    before the exchange (see :mod:`job_runtime.operators.combiner`)."""
    has_sink: bool = False
    branches: list[Branch] = dataclasses.field(default_factory=list)
    """The side outputs of this stage's keyed operator that the pipeline reads."""
    source_batch_size: int = RECORD_BATCH_SIZE
    """Rows per batch for a source that is not told otherwise (stage 0 only)."""
    source_columns: frozenset[str] | None = None
    """The only columns of the source's records the pipeline reads (stage 0 only)."""
    watermarks: WatermarkStrategy | None = None
    """The source's event time (stage 0 only)."""
    input_chains: list[list[RecordOp]] = dataclasses.field(default_factory=list)
    """A union's record functions per input, before ``chain`` (stage 0 only; empty
    with one source)."""
    input_watermarks: list[WatermarkStrategy | None] = dataclasses.field(default_factory=list)
    """A union's event time per input (stage 0 only; empty with one source)."""

    @property
    def uid(self) -> str:
        return self.keyed.uid if self.keyed else f"stage-{self.index}"


def plan_stages(pipeline: Pipeline) -> list[StagePlan]:
    stages = [StagePlan(index=0)]
    expect_keyed: KeyBy | None = None
    for op in pipeline.ops:
        current = stages[-1]
        if expect_keyed is not None:
            if not isinstance(op, KeyedOp):
                raise PipelineDefinitionError(problem="key_by() must be followed by a keyed operator")
            branches = [b for b in pipeline.branches if b.origin is op]
            if op.vectorised and not branches:
                # Late records routed aside must cross the exchange as records, not
                # folded into a partial row.
                current.combine = op
            stages.append(StagePlan(index=len(stages), keyed=op, branches=branches))
            expect_keyed = None
        elif isinstance(op, KeyBy):
            current.out_key = op
            expect_keyed = op
        elif isinstance(op, RecordOp):
            current.chain.append(op)
        else:
            raise PipelineDefinitionError(problem=f"{op.kind}() needs key_by() before it")
    if expect_keyed is not None:
        raise PipelineDefinitionError(problem="key_by() must be followed by a keyed operator")
    stages[-1].has_sink = True
    stages[0].source_batch_size = source_batch_size(pipeline)
    stages[0].source_columns = source_columns(pipeline)
    stages[0].watermarks = pipeline.watermarks
    if len(pipeline.inputs) > 1:
        stages[0].input_chains = [list(entry.ops) for entry in pipeline.inputs]
        stages[0].input_watermarks = [entry.watermarks for entry in pipeline.inputs]
    return stages


def source_batch_size(pipeline: Pipeline) -> int:
    """:data:`VECTORISED_BATCH_SIZE` when no Python function sees single records,
    else :data:`RECORD_BATCH_SIZE`."""
    ops = [*pipeline.ops, *(op for entry in pipeline.inputs for op in entry.ops)]
    vectorised = all(
        (isinstance(op, RecordOp) and op.kind == RecordKind.MAP_BATCHES)
        or isinstance(op, KeyBy)
        or (isinstance(op, KeyedOp) and not op.per_record)
        for op in ops)
    return VECTORISED_BATCH_SIZE if vectorised else RECORD_BATCH_SIZE


def source_columns(pipeline: Pipeline) -> frozenset[str] | None:
    """The source's columns the pipeline reads, when it reads them only by name: a
    ``key_by(<column>)`` followed by ``aggregate``, whose inputs are the key and the
    aggregated columns. ``None`` (every column) as soon as a function sees the records,
    since what it reads cannot be known; only the first keyed operator matters, as it
    makes new records. The event-time column stays whatever reads it: the source
    task's watermarks read it too."""
    if len(pipeline.inputs) > 1:
        return None  # each input is read with its own functions first
    event_time = None if pipeline.watermarks is None else pipeline.watermarks.column
    branched = {id(b.origin) for b in pipeline.branches}
    for op in pipeline.ops:
        if isinstance(op, KeyBy):
            continue
        if (isinstance(op, KeyedOp) and op.vectorised and op.key.columns is not None
                and id(op) not in branched):
            return frozenset({*op.key.columns, *(column for _, _, column in op.aggregates
                                            if column is not None),
                              *([] if event_time is None else [event_time])})
        return None
    return None
