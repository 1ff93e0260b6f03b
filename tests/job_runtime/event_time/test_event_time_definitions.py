"""Event-time pipelines that cannot run are one line when ``build`` runs: a window
without event time, on an unkeyed stream, keyed by a function, outputs named like the
window's columns, strategies and durations that are not."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from job_runtime import Pipeline, sinks, sources, watermarks, windows
from job_runtime.errors import PipelineDefinitionError
from job_runtime.execution.stages import plan_stages, source_batch_size, source_columns

STRATEGY = watermarks.bounded_out_of_orderness("ts", max_delay="5s")


def build(body: Callable[[Pipeline], None]) -> Pipeline:
    p = Pipeline()
    body(p)
    return p


@pytest.mark.parametrize(("body", "message"), [
    (lambda p: p.source(sources.sequence(count=1)).key_by("k").window(windows.tumbling("1m")),
     "window\\(\\) needs event time: give the source watermarks"),
    (lambda p: p.source(sources.sequence(count=1), watermarks=STRATEGY)
     .window(windows.tumbling("1m")),
     "window\\(\\) needs key_by\\(\\) before it"),
    (lambda p: p.source(sources.sequence(count=1), watermarks=STRATEGY)
     .key_by(lambda r: r["k"]).window(windows.tumbling("1m")),
     "window\\(\\) needs key_by\\(<column name>\\)"),
    (lambda p: p.source(sources.sequence(count=1), watermarks=STRATEGY)
     .key_by("k").window("1m"),
     "window\\(\\) needs an assigner from job_runtime.windows"),
    (lambda p: p.source(sources.sequence(count=1), watermarks=STRATEGY)
     .key_by("k").window(windows.tumbling("1m")).aggregate(window_end="count"),
     "may not be named window_end"),
    (lambda p: p.source(sources.sequence(count=1), watermarks="ts"),
     "needs a strategy from job_runtime.watermarks"),
    (lambda p: p.source(sources.sequence(count=1), watermarks=STRATEGY)
     .key_by("k").window(windows.tumbling("1m"), allowed_lateness="-1s"),
     "allowed_lateness"),
    (lambda p: watermarks.bounded_out_of_orderness("", max_delay="1s"),
     "event-time column's name"),
    (lambda p: watermarks.bounded_out_of_orderness("ts", max_delay="5 seconds"),
     "max_delay"),
    (lambda p: watermarks.bounded_out_of_orderness("ts", max_delay="5s", idle_after=0),
     "idle_after must be positive"),
])
def test_an_event_time_pipeline_that_cannot_run_is_one_line(
        body: Callable[[Pipeline], object], message: str) -> None:
    with pytest.raises(PipelineDefinitionError, match=message):
        body(Pipeline())


def per_minute(p: Pipeline) -> None:
    (p.source(sources.sequence(count=1), watermarks=STRATEGY)
      .key_by("user")
      .window(windows.tumbling("1m"), allowed_lateness="30s")
      .aggregate(n="count", total=("sum", "amount"))
      .sink(sinks.discard()))


def test_a_windowed_aggregate_is_planned_vectorised_with_a_combiner_before_the_exchange() -> None:
    p = build(per_minute)
    stages = plan_stages(p)
    keyed = stages[1].keyed
    assert keyed is not None and keyed.kind == "window_aggregate"
    assert keyed.event_time == "ts" and keyed.allowed_lateness == 30_000
    assert stages[0].combine is keyed
    assert stages[0].watermarks is STRATEGY
    assert source_batch_size(p) > 8192
    # The source keeps the key, the aggregated columns and the event time.
    assert source_columns(p) == frozenset({"user", "amount", "ts"})
