"""Side outputs: what a keyed operator routes aside, and the pipelines that read it.

A ``process`` function's ``ctx.output(tag, record)`` and the windows' too-late
records (``windows.late_data()``) are collected per tag by the operator, in order,
beside its main output; the stage that runs the operator writes each tag a branch
reads to that branch's sink.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from keyed_operators import Operators, keyed_op_of

from job_runtime import Pipeline, sinks, sources, watermarks, windows
from job_runtime.errors import PipelineDefinitionError, UserCodeError
from job_runtime.execution.stages import plan_stages
from job_runtime.operators.side_outputs import SideOutputs
from job_runtime.pipeline import MAIN_SINK, KeyedOp
from job_runtime.records import Batch
from job_runtime.windows import LATE_DATA

EVENTS = watermarks.bounded_out_of_orderness("ts", max_delay="1s")


def source() -> Any:
    return sources.sequence(count=1)


def windowed(p: Pipeline, assigner: Any = None, *, lateness: str = "0s") -> Any:
    return (p.source(source(), watermarks=EVENTS).key_by("user")
            .window(assigner or windows.tumbling("10s"), allowed_lateness=lateness))


def late_branch(counted: Any) -> None:
    counted.sink(sinks.discard())
    counted.side_output(windows.late_data()).sink(sinks.discard(), name="late")


def clicks(*rows: tuple[str, int]) -> Batch:
    return Batch(arrow=pa.RecordBatch.from_pylist([{"user": u, "ts": ts} for u, ts in rows]))


def side_rows(side: SideOutputs) -> dict[str, list[tuple[str, int]]]:
    return {tag: [(r["user"], r["ts"]) for batch in batches for r in batch.rows]
            for tag, batches in side.take().items()}


def make(operators: Operators, op: KeyedOp) -> Any:
    """The operator as its task runs it (typed loosely: tests read its ``side``)."""
    return operators.make(op)


@pytest.fixture
def operators(tmp_path: Any) -> Operators:
    return Operators("hashmap", tmp_path)


class TestDefinitions:
    @pytest.mark.parametrize(("build", "says"), [
        (lambda p: p.source(source()).side_output("x"),
         "side_output() reads what a keyed operator routed aside"),
        (lambda p: p.source(source()).key_by("k").reduce(lambda a, b: a).side_output("x"),
         "reduce() has no side outputs"),
        (lambda p: p.source(source()).key_by("k").process(lambda r, c: [r])
         .side_output(windows.late_data()),
         "only windows route late data aside"),
        (lambda p: windowed(p).aggregate(n="count").side_output("other"),
         "its only side output is windows.late_data(), not 'other'"),
        (lambda p: p.source(source()).key_by("k").process(lambda r, c: [r]).side_output(""),
         "side_output() needs a tag"),
        (lambda p: p.source(source()).key_by("k").process(lambda r, c: [r])
         .side_output("x").key_by("k"),
         "key_by() on the side output 'x' is not supported"),
    ])
    def test_a_side_output_where_none_can_be_is_refused_in_one_line(
            self, build: Callable[[Pipeline], Any], says: str) -> None:
        with pytest.raises(PipelineDefinitionError) as raised:
            build(Pipeline())
        assert says in str(raised.value)

    def test_a_side_output_without_a_sink_is_refused_when_the_pipeline_is_checked(self) -> None:
        p = Pipeline()
        rows = p.source(source()).key_by("k").process(lambda r, c: [r])
        rows.sink(sinks.discard())
        rows.side_output("big").map(lambda r: r)
        with pytest.raises(PipelineDefinitionError, match=r"'big' of .* does not end with"):
            p.validate()

    def test_two_sinks_of_one_name_are_refused(self) -> None:
        p = Pipeline()
        rows = p.source(source()).key_by("k").process(lambda r, c: [r])
        rows.sink(sinks.discard(), name="out")
        rows.side_output("big").sink(sinks.discard(), name="out")
        with pytest.raises(PipelineDefinitionError, match="sink names must be unique"):
            p.validate()

    @pytest.mark.parametrize("name", ["", "a/b", "../up", "with space", 3])
    def test_a_sink_name_that_cannot_name_a_folder_is_refused(self, name: Any) -> None:
        rows = Pipeline().source(source()).key_by("k").process(lambda r, c: [r])
        with pytest.raises(PipelineDefinitionError, match=r"sink\(name=\.\.\.\) must be"):
            rows.side_output("big").sink(sinks.discard(), name=name)

    def test_one_side_output_read_twice_is_refused(self) -> None:
        rows = Pipeline().source(source()).key_by("k").process(lambda r, c: [r])
        rows.side_output("big")
        with pytest.raises(PipelineDefinitionError, match="is read twice"):
            rows.side_output("big")

    def test_the_main_sink_keeps_the_name_of_a_job_with_one_sink_and_branches_get_theirs(
            self) -> None:
        p = Pipeline()
        rows = p.source(source()).key_by("k").process(lambda r, c: [r])
        rows.sink(sinks.discard())
        rows.side_output("big").filter(lambda r: True).sink(sinks.discard())
        p.validate()
        assert [name for name, _ in p.sinks()] == [MAIN_SINK, "sink-big"]

    def test_a_late_branch_makes_the_window_take_whole_records_across_the_exchange(
            self) -> None:
        plain, branched = Pipeline(), Pipeline()
        windowed(plain).aggregate(n="count").sink(sinks.discard())
        late_branch(windowed(branched).aggregate(n="count"))
        (plain_first, _), (first, second) = plan_stages(plain), plan_stages(branched)
        # Without a branch, partial rows cross; with one, the records themselves
        # (a partial row cannot say which records were late), every column of them.
        assert plain_first.combine is not None and plain_first.source_columns is not None
        assert first.combine is None and first.source_columns is None
        assert [b.tag for b in second.branches] == [LATE_DATA]


class TestLateRecordsOfWindows:
    def test_a_record_too_late_for_its_window_goes_aside_and_is_still_counted(
            self, operators: Operators) -> None:
        p = Pipeline()
        late_branch(windowed(p, lateness="2s").aggregate(n="count"))
        op = make(operators, keyed_op_of(p))
        op.process(clicks(("a", 1_000), ("b", 5_000)))
        op.on_watermark(10_500)
        assert side_rows(op.side) == {}
        # Within the lateness: its row again; past it: aside.
        op.process(clicks(("a", 2_000), ("c", 12_000)))
        assert side_rows(op.side) == {}
        op.on_watermark(12_000)
        op.process(clicks(("b", 9_000), ("a", 13_000), ("a", 3_000)))
        assert side_rows(op.side) == {LATE_DATA: [("b", 9_000), ("a", 3_000)]}
        assert op.late_records == 2

    def test_a_sliding_record_late_for_one_window_but_not_another_is_not_aside(
            self, operators: Operators) -> None:
        p = Pipeline()
        late_branch(windowed(p, windows.sliding("10s", every="5s")).aggregate(n="count"))
        op = make(operators, keyed_op_of(p))
        op.on_watermark(9_999)  # [0, 10s) is gone; [5s, 15s) is open
        op.process(clicks(("a", 7_000), ("a", 4_000)))
        assert side_rows(op.side) == {LATE_DATA: [("a", 4_000)]}
        # Counted per window: 7 s in [0, 10 s); 4 s in [-5 s, 5 s) and [0, 10 s).
        assert op.late_records == 3

    def test_sessions_and_window_functions_route_their_late_records_too(
            self, operators: Operators) -> None:
        sessions, reduced = Pipeline(), Pipeline()
        late_branch(windowed(sessions, windows.session(gap="2s")).aggregate(n="count"))
        late_branch(windowed(reduced).reduce(lambda a, b: a))
        for p in (sessions, reduced):
            op = make(operators, keyed_op_of(p))
            op.process(clicks(("a", 1_000)))
            op.on_watermark(20_000)
            op.process(clicks(("a", 500), ("a", 30_000)))
            assert side_rows(op.side) == {LATE_DATA: [("a", 500)]}, p


class TestProcessOutputs:
    def test_ctx_output_routes_records_by_tag_in_order_from_records_and_timers(
            self, operators: Operators) -> None:
        def fn(record: dict[str, Any], ctx: Any) -> list[dict[str, Any]]:
            if record["ts"] > 100:
                ctx.output("big", record)
            ctx.output("all", record)
            ctx.timers.register_event_time(record["ts"])
            return [record]

        def on_timer(ts: int, ctx: Any) -> None:
            ctx.output("fired", {"user": ctx.key, "ts": ts})

        p = Pipeline()
        rows = (p.source(source(), watermarks=EVENTS).key_by("user")
                .process(fn, on_timer=on_timer))
        rows.sink(sinks.discard())
        op = make(operators, keyed_op_of(p))
        main = op.process(clicks(("a", 50), ("b", 150), ("a", 250)))
        assert [r["ts"] for r in main.rows] == [50, 150, 250]
        assert side_rows(op.side) == {"big": [("b", 150), ("a", 250)],
                                      "all": [("a", 50), ("b", 150), ("a", 250)]}
        op.on_watermark(200)
        assert side_rows(op.side) == {"fired": [("a", 50), ("b", 150)]}
        assert side_rows(op.side) == {}

    def test_outputting_something_that_is_not_a_record_fails_in_the_users_operator(
            self, operators: Operators) -> None:
        p = Pipeline()
        (p.source(source()).key_by("user")
         .process(lambda r, ctx: ctx.output("big", 42), name="route")
         .sink(sinks.discard()))
        op = make(operators, keyed_op_of(p))
        with pytest.raises(UserCodeError) as raised:
            op.process(clicks(("a", 1)))
        assert raised.value.operator == "route"
        assert "needs a record (a dict), got int" in raised.value.details


def test_side_records_keep_their_order_per_tag_across_rows_and_batches() -> None:
    side = SideOutputs()
    side.add("t", {"user": "a", "ts": 1})
    side.add_batch("t", clicks(("b", 2), ("c", 3)))
    side.add("t", {"user": "d", "ts": 4})
    side.add("u", {"user": "e", "ts": 5})
    assert side
    assert side_rows(side) == {"t": [("a", 1), ("b", 2), ("c", 3), ("d", 4)],
                               "u": [("e", 5)]}
    assert not side

