"""Cutting a pipeline into stages at every ``key_by``.

Stage 0 holds the source and the record functions up to the first ``key_by``;
every further stage starts with a keyed operator. Each stage runs as one task in
each of the P subtasks, and between two stages every subtask sends to every
subtask (the keyed exchange).
"""

from __future__ import annotations

import dataclasses

from job_runtime.errors import PipelineDefinitionError
from job_runtime.pipeline import KeyBy, KeyedOp, Pipeline, RecordOp


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
            if op.kind == "aggregate":
                current.combine = op
            stages.append(StagePlan(index=len(stages), keyed=op))
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
    return stages
