"""A source's batches are large when only Arrow and numpy touch the records, and
small enough for barriers to pass quickly when a Python function sees each one;
a size the job gives is kept."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from job_runtime import Pipeline, sinks, sources
from job_runtime.execution.stages import VECTORISED_BATCH_SIZE, plan_stages
from job_runtime.sources.sequence import SequenceSource
from job_runtime.sources.source_contract import RECORD_BATCH_SIZE, SourceContext


def _key(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


def vectorised(p: Pipeline) -> None:
    (p.source(sources.sequence(count=10))
      .map_batches(_key)
      .key_by("seq")
      .aggregate(n="count")
      .sink(sinks.discard()))


def with_a_map(p: Pipeline) -> None:
    (p.source(sources.sequence(count=10))
      .map(lambda r: r)
      .key_by("seq")
      .aggregate(n="count")
      .sink(sinks.discard()))


def with_a_process(p: Pipeline) -> None:
    (p.source(sources.sequence(count=10))
      .map_batches(_key)
      .key_by("seq")
      .process(lambda r, ctx: [r])
      .sink(sinks.discard()))


def after_an_aggregate_a_filter(p: Pipeline) -> None:
    (p.source(sources.sequence(count=10))
      .key_by("seq")
      .aggregate(n="count")
      .filter(lambda r: True)
      .sink(sinks.discard()))


@pytest.mark.parametrize(("build", "size"), [
    (vectorised, VECTORISED_BATCH_SIZE),
    (with_a_map, RECORD_BATCH_SIZE),
    (with_a_process, RECORD_BATCH_SIZE),
    (after_an_aggregate_a_filter, RECORD_BATCH_SIZE),
])
def test_the_plan_picks_the_source_batch_size_from_the_operators(
        build: Callable[[Pipeline], None], size: int) -> None:
    p = Pipeline()
    build(p)
    assert plan_stages(p)[0].source_batch_size == size


def _first_batch_rows(source: SequenceSource, *, batch_size: int) -> int:
    context = SourceContext(subtask=0, parallelism=1, staging_uri="unused",
                            batch_size=batch_size)
    split = source.splits(context=context)[0]
    batch = source.open(split, None, context=context).read_batch()
    assert batch is not None
    return len(batch)


def test_a_sequence_without_a_size_reads_batches_of_the_plans_size() -> None:
    assert _first_batch_rows(sources.sequence(count=10**6, splits=1), batch_size=50_000) == 50_000


def test_a_size_the_job_gives_wins_over_the_plans() -> None:
    source = sources.sequence(count=10**6, splits=1, batch_size=1000)
    assert _first_batch_rows(source, batch_size=50_000) == 1000
