"""``union``: several sources read as one stream by the source task.

Each input keeps its own record functions (before the union) and its own
watermarks; its splits are renumbered so that every process, and every attempt,
derives the same index for the same split, the first input's unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from job_runtime import Pipeline, sinks, sources, watermarks
from job_runtime.errors import PipelineDefinitionError
from job_runtime.execution.stages import plan_stages
from job_runtime.execution.subtask.watermark_tracking import SplitWatermarks
from job_runtime.sources.source_contract import RestoredSplit, Source, SourceContext, Split
from job_runtime.sources.union import UNION_INDEX_BASE, UnionPart, UnionSource, input_of

CONTEXT = SourceContext(subtask=0, parallelism=1, staging_uri="file:///unused")


def events(max_delay: str = "1s", *, column: str = "ts", idle_after: str | None = None) -> Any:
    return watermarks.bounded_out_of_orderness(column, max_delay=max_delay,
                                               idle_after=idle_after)


def seq(count: int = 10) -> Source:
    return sources.sequence(count=count)


class TestDefinitions:
    def test_each_input_keeps_its_functions_and_the_union_continues_with_common_ones(
            self) -> None:
        p = Pipeline()
        first = p.source(seq()).map(lambda r: r, name="first-map")
        second = p.source(seq()).filter(lambda r: True, name="second-filter")
        (first.union(second).map(lambda r: r, name="common")
         .key_by("seq").reduce(lambda a, b: a, name="sum").sink(sinks.discard()))
        p.validate()
        stage = plan_stages(p)[0]
        assert [[op.uid for op in ops] for ops in stage.input_chains] == [
            ["first-map"], ["second-filter"]]
        assert [op.uid for op in stage.chain] == ["common"]
        assert stage.source_columns is None
        assert isinstance(p.job_source(), UnionSource)

    def test_a_pipeline_with_one_source_reads_it_unchanged(self) -> None:
        p = Pipeline()
        source = seq()
        p.source(source).map(lambda r: r).sink(sinks.discard())
        assert p.job_source() is source
        assert plan_stages(p)[0].input_chains == []

    def test_default_operator_names_stay_unique_across_inputs(self) -> None:
        p = Pipeline()
        first = p.source(seq()).map(lambda r: r)
        second = p.source(seq()).map(lambda r: r)
        first.union(second).map(lambda r: r).sink(sinks.discard())
        p.validate()

    @pytest.mark.parametrize(("build", "says"), [
        (lambda p: p.source(seq()).union(),
         "union() needs at least one other stream"),
        (lambda p: p.source(seq()).union(Pipeline().source(seq())),
         "union() joins streams of this pipeline's p.source"),
        (lambda p: p.source(seq()).key_by("seq").reduce(lambda a, b: a)
         .union(p.source(seq())),
         "union() comes before any key_by"),
        (lambda p: p.source(seq()).union(p.source(seq()).key_by("seq")),
         "key_by() on the stream of a second source is for connect()"),
        (lambda p: p.source(seq(), watermarks=events()).union(p.source(seq())),
         "all have watermarks= or none of them"),
        (lambda p: p.source(seq(), watermarks=events()).union(
            p.source(seq(), watermarks=events(column="time"))),
         "event time is one column; their watermarks name time, ts"),
        (lambda p: _twice(p),
         "union() joins each source's stream once"),
        (lambda p: p.source(seq()).union(p.source(seq())).map(lambda r: r)
         .union(p.source(seq())),
         "union() joins all the sources at once"),
        (lambda p: p.source(seq()).sink(sinks.discard()) or p.source(seq()).sink(sinks.discard()),
         "sink() on the stream of a second source"),
    ])
    def test_a_union_that_cannot_be_is_refused_in_one_line(
            self, build: Callable[[Pipeline], Any], says: str) -> None:
        with pytest.raises(PipelineDefinitionError) as raised:
            p = Pipeline()
            build(p)
            p.validate()
        assert says in str(raised.value)


def _twice(p: Pipeline) -> None:
    second = p.source(seq())
    joined = p.source(seq()).union(second)
    joined.union(second)


class TestSplits:
    def union(self, tmp_path: Path) -> UnionSource:
        for name in ("a.txt", "b.txt", "c.txt"):
            (tmp_path / name).write_text(f"{name}\n")
        return UnionSource([seq(count=10), sources.files(str(tmp_path), format="text")])

    def test_the_first_inputs_splits_keep_their_numbers_and_the_others_move_up(
            self, tmp_path: Path) -> None:
        union = self.union(tmp_path)
        first = union.inputs[0].splits(context=CONTEXT)
        second = union.inputs[1].splits(context=CONTEXT)
        assert [s.index for s in union.splits(context=CONTEXT)] == \
            [s.index for s in first] + [UNION_INDEX_BASE + s.index for s in second]
        assert [input_of(s.index) for s in union.splits(context=CONTEXT)] == \
            [0] * len(first) + [1] * len(second)

    def test_each_split_is_read_by_its_own_inputs_reader(self, tmp_path: Path) -> None:
        union = self.union(tmp_path)
        read: list[Any] = []
        for split in union.splits(context=CONTEXT):
            reader = union.open(split, None, context=CONTEXT)
            while (batch := reader.read_batch()) is not None:
                read.extend(batch.rows)
            reader.close()
        assert sorted(r["seq"] for r in read if "seq" in r) == list(range(10))
        assert sorted(r["line"] for r in read if "line" in r) == ["a.txt", "b.txt", "c.txt"]

    def test_a_restored_split_goes_back_to_its_input_under_its_union_index(self) -> None:
        class Discovering(Source):
            name = "discovering"

            def splits(self, *, context: SourceContext) -> list[Split]:
                return [Split(index=0, description="planned")]

            def open(self, split: Split, position: Any, *, context: SourceContext) -> Any:
                raise AssertionError("not read here")

            @property
            def discovery_interval(self) -> float | None:
                return 5.0

            def discover(self, *, context: SourceContext, known: Any) -> list[Split]:
                return [] if 7 in known else [Split(index=7, description="found")]

            def restore_splits(self, splits: Any, positions: Any, *,
                               context: SourceContext) -> list[RestoredSplit]:
                return [RestoredSplit(split=Split(index=index, description=f"at {position}"),
                                      position=position)
                        for index, position in sorted(positions.items())]

        union = UnionSource([seq(), Discovering()])
        assert union.discovery_interval == 5.0
        (found,) = union.discover(context=CONTEXT, known=set())
        assert found.index == UNION_INDEX_BASE + 7
        assert union.discover(context=CONTEXT, known={UNION_INDEX_BASE + 7}) == []
        restored = union.restore_splits(union.splits(context=CONTEXT),
                                        {3: 5, UNION_INDEX_BASE + 7: 42,
                                         5 * UNION_INDEX_BASE: 1}, context=CONTEXT)
        by_index = {item.split.index: item for item in restored}
        # The sequence's own splits by index; the other input's from its own positions;
        # an input the union no longer has, nothing.
        assert by_index[3].position == 5 and by_index[0].position is None
        assert by_index[UNION_INDEX_BASE + 7].position == 42
        assert by_index[UNION_INDEX_BASE + 7].split.description == UnionPart(
            place=1, split=Split(index=7, description="at 42"))
        assert all(input_of(index) in (0, 1) for index in by_index)


def test_each_inputs_splits_hold_time_back_by_their_own_delay_and_idleness() -> None:
    now = [100.0]
    strategies = {0: events("1s"), 1: events("10s", idle_after="30s")}
    tracker = SplitWatermarks(strategy=strategies[0], clock=lambda: now[0],
                              strategy_of=lambda split: strategies[input_of(split)])
    tracker.add_split(0)
    tracker.add_split(UNION_INDEX_BASE)
    tracker.observe(0, np.array([50_000]))
    tracker.observe(UNION_INDEX_BASE, np.array([50_000]))
    assert tracker.advance() == 50_000 - 10_000 - 1  # the second input's longer delay
    now[0] += 31.0  # the second input went quiet: the first's time alone
    tracker.observe(0, np.array([60_000]))
    assert tracker.advance() == 60_000 - 1_000 - 1


def test_a_union_reads_together_the_splits_of_inputs_that_read_theirs_together() -> None:
    kafka = sources.kafka(["clicks"], "127.0.0.1:9")
    union = UnionSource([seq(), kafka])
    assert not union.reads_splits_together
    assert not union.reads_together(3)
    assert union.reads_together(UNION_INDEX_BASE + 3)
