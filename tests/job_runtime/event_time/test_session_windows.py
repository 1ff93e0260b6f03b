"""Session windows (``windows.session(gap=...)``), against both state backends: a
key's records less than ``gap`` apart make one session, whatever order they come in;
a session fires once when the watermark reaches its last millisecond; late records
within the allowed lateness update and re-emit its row, later ones are counted and
dropped; and a restore at another parallelism fires each session once, on the
subtask of its key, and nothing fired before fires again."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from keyed_operators import MAX_P, Operators, keyed_op_of, session_reference

from job_runtime import Pipeline, sinks, sources, watermarks, windows
from job_runtime.errors import PipelineDefinitionError, UserCodeError
from job_runtime.execution.stages import plan_stages, source_batch_size
from job_runtime.operators.keyed import build_keyed_operator
from job_runtime.operators.keyed_operator import KeyedOperator
from job_runtime.operators.session_window import SessionWindowOperator
from job_runtime.pipeline import KeyedOp
from job_runtime.records import Batch, key_group_of
from job_runtime.state.backend import BACKEND_KINDS
from job_runtime.watermarks import MAX_WATERMARK


def session_op(*, gap: str = "10s", lateness: str = "0s",
               outputs: dict[str, Any] | None = None) -> KeyedOp:
    p = Pipeline()
    (p.source(sources.sequence(count=1),
              watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="1s"))
      .key_by("user")
      .window(windows.session(gap=gap), allowed_lateness=lateness)
      .aggregate(**(outputs or {"n": "count", "total": ("sum", "amount")}))
      .sink(sinks.discard()))
    return keyed_op_of(p)


@pytest.fixture(params=BACKEND_KINDS)
def operators(request: pytest.FixtureRequest, tmp_path: Path) -> Operators:
    return Operators(request.param, tmp_path)


def clicks(*rows: tuple[str, int, int], arrow: bool = True) -> Batch:
    records = [{"user": u, "ts": ts, "amount": a} for u, ts, a in rows]
    return Batch(arrow=pa.RecordBatch.from_pylist(records)) if arrow else Batch(rows=records)


Row = tuple[str, int, int, int, float]


def rows(batch: Batch) -> list[Row]:
    return sorted((r["user"], r["window_start"], r["window_end"], r["n"], r["total"])
                  for r in batch.rows)


def owner(ops: list[KeyedOperator], user: str) -> KeyedOperator:
    return next(o for o in ops if key_group_of(user, MAX_P) in o.key_groups)


def route(ops: list[KeyedOperator], *records: tuple[str, int, int]) -> list[Row]:
    """Each record to the operator owning its key's group, as the exchange does."""
    out: list[Row] = []
    for o in ops:
        mine = [r for r in records if key_group_of(r[0], MAX_P) in o.key_groups]
        if mine:
            out += rows(o.process(clicks(*mine)))
    return out


class TestMerging:
    def test_out_of_order_records_of_a_key_merge_into_one_session(
            self, operators: Operators) -> None:
        op = operators.make(session_op())
        assert rows(op.process(clicks(("a", 30_000, 1), ("b", 1_000, 5)))) == []
        assert rows(op.process(clicks(("a", 22_000, 2), ("a", 36_000, 4)))) == []
        assert rows(op.on_watermark(MAX_WATERMARK)) == [
            ("a", 22_000, 46_000, 3, 7.0), ("b", 1_000, 11_000, 1, 5.0)]

    def test_a_record_in_the_gap_between_two_sessions_joins_them(
            self, operators: Operators) -> None:
        op = operators.make(session_op())
        op.process(clicks(("a", 1_000, 1), ("a", 15_000, 2)))
        assert isinstance(op, SessionWindowOperator)
        assert [s[1:3] for s in op.open_sessions()] == [(1_000, 11_000), (15_000, 25_000)]
        op.process(clicks(("a", 8_000, 10)))  # less than 10 s from both neighbours
        assert [s[1:3] for s in op.open_sessions()] == [(1_000, 25_000)]
        assert rows(op.on_watermark(MAX_WATERMARK)) == [("a", 1_000, 25_000, 3, 13.0)]

    def test_records_exactly_a_gap_apart_are_two_sessions(self, operators: Operators) -> None:
        op = operators.make(session_op())
        op.process(clicks(("a", 0, 1), ("a", 10_000, 2)))
        assert rows(op.on_watermark(MAX_WATERMARK)) == [
            ("a", 0, 10_000, 1, 1.0), ("a", 10_000, 20_000, 1, 2.0)]

    def test_count_sum_min_max_and_mean_have_the_types_of_the_tumbling_aggregate(
            self, operators: Operators) -> None:
        op = operators.make(session_op(outputs={
            "n": "count", "total": ("sum", "amount"), "low": ("min", "amount"),
            "high": ("max", "amount"), "avg": ("mean", "amount")}))
        op.process(clicks(("a", 1_000, 3), ("a", 2_000, 9), ("a", 5_000, 6)))
        fired = op.on_watermark(MAX_WATERMARK).arrow
        assert fired.to_pylist() == [{"user": "a", "window_start": 1_000, "window_end": 15_000,
                                      "n": 3, "total": 18.0, "low": 3.0, "high": 9.0,
                                      "avg": 6.0}]
        assert [str(t) for t in fired.schema.types] == [
            "string", "int64", "int64", "int64", "double", "double", "double", "double"]

    def test_records_given_as_rows_are_sessioned_alike(self, operators: Operators) -> None:
        op = operators.make(session_op())
        op.process(clicks(("a", 5_000, 1), ("a", 1_000, 2), arrow=False))
        assert rows(op.on_watermark(MAX_WATERMARK)) == [("a", 1_000, 15_000, 2, 3.0)]

    def test_a_timestamp_column_gives_timestamp_window_bounds(
            self, operators: Operators) -> None:
        op = operators.make(session_op())
        at = dt.datetime(2026, 1, 1, 0, 0, 5, tzinfo=dt.UTC)
        op.process(Batch(arrow=pa.RecordBatch.from_pylist(
            [{"user": "a", "ts": at, "amount": 3}],
            schema=pa.schema([("user", pa.string()), ("ts", pa.timestamp("us", tz="UTC")),
                              ("amount", pa.int64())]))))
        fired = op.on_watermark(MAX_WATERMARK).arrow
        assert fired.schema.field("window_start").type == pa.timestamp("ms", tz="UTC")
        assert fired.column("window_start")[0].as_py() == at
        assert fired.column("window_end")[0].as_py() == at + dt.timedelta(seconds=10)


class TestFiring:
    def test_a_session_fires_once_when_the_watermark_reaches_its_last_millisecond(
            self, operators: Operators) -> None:
        op = operators.make(session_op())
        op.process(clicks(("a", 1_000, 1), ("b", 4_000, 2), ("a", 6_000, 4)))
        assert rows(op.on_watermark(13_999)) == [("b", 4_000, 14_000, 1, 2.0)]
        assert rows(op.on_watermark(15_998)) == []
        assert rows(op.on_watermark(15_999)) == [("a", 1_000, 16_000, 2, 5.0)]
        assert rows(op.on_watermark(MAX_WATERMARK)) == []
        assert op.key_count() == 0, "fired sessions without lateness are dropped"

    def test_a_merge_that_moves_the_end_moves_the_firing(self, operators: Operators) -> None:
        op = operators.make(session_op())
        op.process(clicks(("a", 1_000, 1)))
        op.process(clicks(("a", 8_000, 2)))  # the session now ends at 18 000
        assert rows(op.on_watermark(10_999)) == []
        assert rows(op.on_watermark(17_999)) == [("a", 1_000, 18_000, 2, 3.0)]

    def test_a_watermark_that_goes_back_fires_nothing(self, operators: Operators) -> None:
        op = operators.make(session_op())
        op.process(clicks(("a", 1_000, 1)))
        assert rows(op.on_watermark(5_000)) == []
        assert rows(op.on_watermark(4_000)) == []
        assert len(op.on_watermark(MAX_WATERMARK).rows) == 1


class TestLateness:
    def test_late_records_within_the_lateness_update_the_session_and_re_emit_its_row(
            self, operators: Operators) -> None:
        op = operators.make(session_op(lateness="5s"))
        op.process(clicks(("a", 1_000, 1)))
        assert rows(op.on_watermark(11_000)) == [("a", 1_000, 11_000, 1, 1.0)]
        # Late, but the session is kept: its row again, updated, at once, once per batch
        # (the records do not move its end: each one's own window ends before it).
        assert rows(op.process(clicks(("a", 500, 10), ("a", 900, 100)))) == [
            ("a", 500, 11_000, 3, 111.0)]
        assert rows(op.on_watermark(15_000)) == [], "a fired session does not fire again"
        assert isinstance(op, SessionWindowOperator)
        assert [s[1:] for s in op.open_sessions()] == [(500, 11_000, True)]
        op.on_watermark(15_999)  # its last millisecond plus the lateness
        assert op.open_sessions() == []

    def test_a_late_record_that_extends_a_fired_session_past_the_watermark_fires_it_later(
            self, operators: Operators) -> None:
        op = operators.make(session_op(lateness="5s"))
        op.process(clicks(("a", 1_000, 1)))
        assert rows(op.on_watermark(11_000)) == [("a", 1_000, 11_000, 1, 1.0)]
        assert rows(op.process(clicks(("a", 9_000, 2)))) == []  # now ends at 19 000
        assert rows(op.on_watermark(18_999)) == [("a", 1_000, 19_000, 2, 3.0)]

    def test_records_later_than_the_lateness_are_counted_and_dropped(
            self, operators: Operators) -> None:
        op = operators.make(session_op(lateness="5s"))
        op.process(clicks(("a", 1_000, 1)))
        op.on_watermark(16_000)  # past 11 000 - 1 + 5 000: the session is gone
        assert rows(op.process(clicks(("a", 500, 100), ("b", 500, 1)))) == []
        assert op.late_records == 2
        # A late record whose own session is within the lateness: it fires at once.
        assert rows(op.process(clicks(("c", 5_000, 3)))) == [("c", 5_000, 15_000, 1, 3.0)]
        assert rows(op.on_watermark(MAX_WATERMARK)) == []

    def test_without_lateness_a_record_for_a_fired_session_opens_none(
            self, operators: Operators) -> None:
        op = operators.make(session_op())
        op.process(clicks(("a", 1_000, 1)))
        op.on_watermark(10_999)
        assert rows(op.process(clicks(("a", 900, 5)))) == []
        assert op.late_records == 1
        assert op.key_count() == 0


class TestRestore:
    def test_after_a_restore_at_another_parallelism_each_session_fires_once_on_its_subtask(
            self, operators: Operators) -> None:
        op = session_op(lateness="5s")
        users = [f"user-{i}" for i in range(30)]
        old = [operators.make(op, subtask=s, parallelism=2) for s in range(2)]
        # Per user: a session at 1 000 (fires at 10 999 on subtask 0 only, so that the
        # subtasks' watermarks differ) and one at 30 000 + i.
        route(old, *[(u, 1_000, 1) for u in users],
              *[(u, 30_000 + i, 2) for i, u in enumerate(users)])
        fired_before = rows(old[0].on_watermark(12_000))
        assert fired_before and {r[1] for r in fired_before} == {1_000}
        new = operators.restart(old, parallelism=3, op=op)

        after: list[tuple[Row, int]] = []
        for o in new:
            after += [(r, o.subtask) for r in rows(o.on_watermark(MAX_WATERMARK))]
        for (user, *_), subtask in after:
            assert owner(new, user).subtask == subtask
        emitted = [r for r, _ in after] + fired_before
        assert sorted(emitted) == sorted(
            [(u, 1_000, 11_000, 1, 1.0) for u in users]
            + [(u, 30_000 + i, 40_000 + i, 1, 2.0) for i, u in enumerate(users)])

    def test_a_fired_session_kept_for_lateness_takes_late_records_after_a_restore(
            self, operators: Operators) -> None:
        op = session_op(lateness="5s")
        old = [operators.make(op)]
        old[0].process(clicks(("a", 1_000, 1)))
        assert rows(old[0].on_watermark(11_000)) == [("a", 1_000, 11_000, 1, 1.0)]
        new = operators.restart(old, parallelism=2, op=op)
        assert route(new, ("a", 500, 4)) == [("a", 500, 11_000, 2, 5.0)]
        assert [r for o in new for r in rows(o.on_watermark(MAX_WATERMARK))] == []

    def test_a_record_too_late_before_the_checkpoint_is_too_late_when_replayed_after_it(
            self, operators: Operators) -> None:
        op = session_op()
        old = [operators.make(op, subtask=s, parallelism=2) for s in range(2)]
        users = [f"user-{i}" for i in range(20)]
        route(old, *[(u, 1_000, 1) for u in users])
        fired_before = [r for o in old for r in rows(o.on_watermark(20_000))]
        assert len(fired_before) == len(users)
        new = operators.restart(old, parallelism=3, op=op)
        # The watermark restarts from the minimum; the replayed records are still late.
        assert route(new, *[(u, 2_000, 7) for u in users]) == []
        assert sum(o.late_records for o in new) == len(users)
        assert [r for o in new for r in rows(o.on_watermark(MAX_WATERMARK))] == []

    def test_sessions_restored_before_any_record_keep_timestamp_bounds(
            self, operators: Operators) -> None:
        op = session_op()
        old = operators.make(op)
        at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        old.process(Batch(arrow=pa.RecordBatch.from_pylist(
            [{"user": "a", "ts": at, "amount": 1}],
            schema=pa.schema([("user", pa.string()), ("ts", pa.timestamp("ms", tz="UTC")),
                              ("amount", pa.int64())]))))
        restored = operators.make(op)
        restored.restore([operators.checkpoint(old)])
        fired = restored.on_watermark(MAX_WATERMARK).arrow
        assert fired.column("window_start").to_pylist() == [at]


class TestAgainstAReference:
    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_shuffled_records_with_a_checkpoint_between_give_the_sessions_of_a_reference(
            self, operators: Operators, seed: int) -> None:
        rng = random.Random(seed)
        gap = 1_000
        records = [(f"k{rng.randrange(12)}", rng.randrange(0, 60_000), rng.randrange(100))
                   for _ in range(600)]
        rng.shuffle(records)
        op = session_op(gap="1s")
        ops = [operators.make(op, subtask=s, parallelism=2) for s in range(2)]
        half = len(records) // 2
        for i in range(0, half, 50):
            route(ops, *records[i:i + 50])
        ops = operators.restart(ops, parallelism=3, op=op)
        for i in range(half, len(records), 50):
            route(ops, *records[i:i + 50])
        emitted = [r for o in ops for r in rows(o.on_watermark(MAX_WATERMARK))]
        frame = pd.DataFrame(records, columns=["user", "ts", "amount"])
        expected = session_reference(frame, gap)
        assert [r[:4] for r in sorted(emitted)] == [r[:4] for r in expected]
        assert [r[4] for r in sorted(emitted)] == pytest.approx([r[4] for r in expected])
        assert all(o.late_records == 0 for o in ops)
        for o in ops:
            assert isinstance(o, SessionWindowOperator)
            assert (o.key_count(), len(o.timers)) == (0, 0), "nothing is left behind"


class TestDefinition:
    def test_session_windows_take_records_without_a_combiner(self) -> None:
        op = session_op()
        assert (op.kind, op.vectorised) == ("session_aggregate", False)
        assert op.window == windows.session(gap="10s")
        assert windows.session(gap="1m").describe() == "session(gap=60000ms)"
        p = Pipeline()
        (p.source(sources.sequence(count=1),
                  watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="1s"))
          .key_by("user").window(windows.session(gap=5)).aggregate(n="count")
          .sink(sinks.discard()))
        stages = plan_stages(p)
        assert stages[0].combine is None
        assert source_batch_size(p) < 65536

    @pytest.mark.parametrize("gap", ["0s", -1, "soon", True])
    def test_a_gap_that_is_not_a_positive_duration_is_one_line(self, gap: Any) -> None:
        with pytest.raises(PipelineDefinitionError) as raised:
            windows.session(gap=gap)
        assert "windows.session gap" in str(raised.value)
        assert "\n" not in str(raised.value)

    def test_sessions_on_a_stream_without_watermarks_are_one_line(self) -> None:
        p = Pipeline()
        keyed = p.source(sources.sequence(count=1)).key_by("user")
        with pytest.raises(PipelineDefinitionError, match="window\\(\\) needs event time") \
                as raised:
            keyed.window(windows.session(gap="10s"))
        assert "\n" not in str(raised.value)

    def test_sessions_on_an_unkeyed_stream_are_one_line(self) -> None:
        p = Pipeline()
        stream = p.source(sources.sequence(count=1),
                          watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="1s"))
        with pytest.raises(PipelineDefinitionError, match="needs key_by\\(\\) before it") \
                as raised:
            stream.window(windows.session(gap="10s"))
        assert "\n" not in str(raised.value)

    def test_an_assigner_that_is_none_names_session_windows_among_the_choices(self) -> None:
        p = Pipeline()
        keyed = p.source(sources.sequence(count=1),
                         watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="1s")
                         ).key_by("user")
        with pytest.raises(PipelineDefinitionError, match=r"windows\.session"):
            keyed.window("10s")  # type: ignore[arg-type]

    def test_a_record_without_its_event_time_is_one_line_naming_the_column(self) -> None:
        op = build_keyed_operator(op=session_op(), subtask=0, max_parallelism=MAX_P,
                                  key_groups=range(MAX_P))
        with pytest.raises(UserCodeError, match="event-time column 'ts' is not in the records"):
            op.process(Batch(arrow=pa.RecordBatch.from_pylist([{"user": "a", "amount": 1}])))
