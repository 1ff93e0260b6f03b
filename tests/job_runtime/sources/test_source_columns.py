"""The plan tells the source which of its columns the pipeline reads, when the pipeline
reads them by name only, so a source can leave the others out of its batches; as soon
as a Python function sees the records, every column is kept."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from job_runtime import Pipeline, sinks, sources
from job_runtime.execution.stages import plan_stages


def _same(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


def count_and_max_per_user(p: Pipeline) -> None:
    (p.source(sources.sequence(count=10))
      .key_by("user")
      .aggregate(n="count", last=("max", "ts"), total=("sum", "amount"))
      .filter(lambda r: True)
      .sink(sinks.discard()))


def count_per_user(p: Pipeline) -> None:
    (p.source(sources.sequence(count=10))
      .key_by("user")
      .aggregate(n="count")
      .sink(sinks.discard()))


def a_map_batches_first(p: Pipeline) -> None:
    (p.source(sources.sequence(count=10))
      .map_batches(_same)
      .key_by("user")
      .aggregate(n="count")
      .sink(sinks.discard()))


def a_reduce(p: Pipeline) -> None:
    (p.source(sources.sequence(count=10))
      .key_by("user")
      .reduce(lambda a, b: a)
      .sink(sinks.discard()))


def a_key_selector(p: Pipeline) -> None:
    (p.source(sources.sequence(count=10))
      .key_by(lambda r: r["user"])
      .process(lambda r, ctx: [r])
      .sink(sinks.discard()))


def no_keyed_operator(p: Pipeline) -> None:
    p.source(sources.sequence(count=10)).sink(sinks.discard())


@pytest.mark.parametrize(("build", "columns"), [
    (count_and_max_per_user, frozenset({"user", "ts", "amount"})),
    (count_per_user, frozenset({"user"})),
    (a_map_batches_first, None),
    (a_reduce, None),
    (a_key_selector, None),
    (no_keyed_operator, None),
])
def test_the_plan_names_the_source_columns_only_a_key_and_aggregates_read(
        build: Callable[[Pipeline], None], columns: frozenset[str] | None) -> None:
    p = Pipeline()
    build(p)
    assert plan_stages(p)[0].source_columns == columns
