"""Timers in ``process(fn, on_timer=...)``, against both state backends: a timer fires
once, for its key, when its clock reaches it; deleted timers do not fire; timers are
part of the checkpoint, restored at another parallelism, and processing-time timers
that fell due while the job was down fire at the first look at the clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from keyed_operators import MAX_P, Operators, keyed_op_of

from job_runtime import Pipeline, sinks, sources, watermarks
from job_runtime.errors import PipelineDefinitionError, UserCodeError
from job_runtime.operators.keyed import build_keyed_operator
from job_runtime.pipeline import KeyedOp
from job_runtime.records import Batch, key_group_of
from job_runtime.state.backend import BACKEND_KINDS
from job_runtime.state.timers import TimeDomain


def remember_and_wake(record: dict[str, Any], ctx: Any) -> None:
    """Counts a user's clicks; one event-time timer 10 s after each click, and a
    processing-time one if the record asks for it; ``cancel`` deletes a timer."""
    seen = ctx.value_state("seen")
    seen.update(seen.value(0) + 1)
    if record.get("cancel"):
        ctx.timers.delete_event_time(record["cancel"])
        return None
    ctx.timers.register_event_time(ctx.timestamp + 10_000)
    if record.get("wake_at"):
        ctx.timers.register_processing_time(record["wake_at"])
    return None


def report(timestamp: int, ctx: Any) -> list[dict[str, Any]]:
    return [{"user": ctx.key, "at": timestamp, "domain": str(ctx.time_domain),
             "seen": ctx.value_state("seen").value(0),
             "watermark": ctx.current_watermark}]


def process_op(*, on_timer: Any = report, event_time: bool = True,
               fn: Any = remember_and_wake) -> KeyedOp:
    p = Pipeline()
    strategy = (watermarks.bounded_out_of_orderness("ts", max_delay="1s")
                if event_time else None)
    (p.source(sources.sequence(count=1), watermarks=strategy)
      .key_by("user")
      .process(fn, on_timer=on_timer)
      .sink(sinks.discard()))
    return keyed_op_of(p)


@pytest.fixture(params=BACKEND_KINDS)
def operators(request: pytest.FixtureRequest, tmp_path: Path) -> Operators:
    return Operators(request.param, tmp_path)


def clicks(*rows: dict[str, Any]) -> Batch:
    return Batch(rows=[{"cancel": None, "wake_at": None, **row} for row in rows])


def fired(batch: Batch) -> list[tuple[str, int, str, int]]:
    return sorted((r["user"], r["at"], r["domain"], r["seen"]) for r in batch.rows)


class TestEventTimeTimers:
    def test_a_timer_fires_once_for_its_key_when_the_watermark_reaches_it(
            self, operators: Operators) -> None:
        op = operators.make(process_op())
        op.process(clicks({"user": "a", "ts": 1_000}, {"user": "b", "ts": 5_000},
                          {"user": "a", "ts": 1_000}))
        assert fired(op.on_watermark(10_999)) == []
        # Registered twice for the same time: one call, with the key's state in scope.
        assert fired(op.on_watermark(11_000)) == [("a", 11_000, "event_time", 2)]
        assert fired(op.on_watermark(11_000)) == []
        out = op.on_watermark(20_000)
        assert fired(out) == [("b", 15_000, "event_time", 1)]
        assert out.rows[0]["watermark"] == 20_000

    def test_a_deleted_timer_does_not_fire(self, operators: Operators) -> None:
        op = operators.make(process_op())
        op.process(clicks({"user": "a", "ts": 1_000}, {"user": "a", "ts": 2_000}))
        op.process(clicks({"user": "a", "ts": 2_500, "cancel": 11_000}))
        assert fired(op.on_watermark(10**12)) == [("a", 12_000, "event_time", 3)]

    def test_timers_registered_in_on_timer_at_a_passed_time_fire_in_the_same_step(
            self, operators: Operators) -> None:
        def chain(timestamp: int, ctx: Any) -> list[dict[str, Any]]:
            if timestamp < 13_000:
                ctx.timers.register_event_time(timestamp + 1_000)
            return [{"user": ctx.key, "at": timestamp}]

        op = operators.make(process_op(on_timer=chain))
        op.process(clicks({"user": "a", "ts": 1_000}))
        assert [r["at"] for r in op.on_watermark(20_000).rows] == [11_000, 12_000, 13_000]

    def test_timers_restore_at_another_parallelism_each_on_the_subtask_of_its_key(
            self, operators: Operators) -> None:
        users = [f"user-{i}" for i in range(40)]
        old = [operators.make(process_op(), subtask=i, parallelism=2) for i in range(2)]
        for i, user in enumerate(users):
            owner = old[key_group_of(user, MAX_P) * 2 // MAX_P]
            owner.process(clicks({"user": user, "ts": 1_000 * i}))
        # One fired before the checkpoint: it must not fire again after the restore.
        before = [r for op in old for r in op.on_watermark(10_000).rows]
        assert [r["user"] for r in before] == ["user-0"]
        blobs = [operators.checkpoint(op) for op in old]
        new = [operators.make(process_op(), subtask=i, parallelism=3) for i in range(3)]
        for op in new:
            op.restore(blobs)
        after = {r["user"]: (r["at"], op.subtask) for op in new
                 for r in op.on_watermark(10**12).rows}
        assert sorted(after) == sorted(users[1:])
        for user, (at, subtask) in after.items():
            assert at == 1_000 * users.index(user) + 10_000
            assert subtask == key_group_of(user, MAX_P) * 3 // MAX_P


class TestProcessingTimeTimers:
    def test_a_processing_time_timer_fires_when_the_clock_reaches_it(
            self, operators: Operators) -> None:
        op = operators.make(process_op())
        op.process(clicks({"user": "a", "ts": 1, "wake_at": 1_005_000}))
        assert fired(op.on_processing_time(1_004_999)) == []
        assert fired(op.on_processing_time(1_005_000)) == [
            ("a", 1_005_000, "processing_time", 1)]
        assert fired(op.on_processing_time(1_010_000)) == []

    def test_one_due_while_the_job_was_down_fires_at_the_first_look_after_the_restore(
            self, operators: Operators) -> None:
        op = operators.make(process_op())
        op.process(clicks({"user": "a", "ts": 1, "wake_at": 1_005_000}))
        blob = operators.checkpoint(op)
        restored = operators.make(process_op())
        restored.restore([blob])
        assert fired(restored.on_processing_time(2_000_000)) == [
            ("a", 1_005_000, "processing_time", 1)]


class TestMisuse:
    def test_a_timer_without_on_timer_is_a_clear_error_naming_the_operator(self) -> None:
        op = build_keyed_operator(op=process_op(on_timer=None), subtask=0,
                                  max_parallelism=MAX_P, key_groups=range(MAX_P))
        with pytest.raises(UserCodeError, match="on_timer=") as raised:
            op.process(clicks({"user": "a", "ts": 1}))
        assert "process" in str(raised.value)

    def test_an_event_time_timer_without_watermarks_is_a_clear_error(self) -> None:
        op = build_keyed_operator(op=process_op(event_time=False, fn=lambda r, ctx: (
            ctx.timers.register_event_time(5)), on_timer=report), subtask=0,
            max_parallelism=MAX_P, key_groups=range(MAX_P))
        with pytest.raises(UserCodeError, match="watermarks="):
            op.process(clicks({"user": "a", "ts": 1}))

    def test_a_timer_at_a_time_that_is_no_time_is_a_clear_error(self) -> None:
        op = build_keyed_operator(op=process_op(fn=lambda r, ctx: (
            ctx.timers.register_event_time("soon")), on_timer=report), subtask=0,
            max_parallelism=MAX_P, key_groups=range(MAX_P))
        with pytest.raises(UserCodeError, match="milliseconds since the epoch"):
            op.process(clicks({"user": "a", "ts": 1}))

    def test_on_timer_that_is_not_a_function_is_refused_at_build_time(self) -> None:
        with pytest.raises(PipelineDefinitionError, match="on_timer"):
            process_op(on_timer="report")

    def test_a_record_without_its_event_time_is_a_clear_error(self) -> None:
        op = build_keyed_operator(op=process_op(), subtask=0, max_parallelism=MAX_P,
                                  key_groups=range(MAX_P))
        with pytest.raises(UserCodeError, match="event-time column 'ts'"):
            op.process(Batch(arrow=pa.RecordBatch.from_pylist([{"user": "a", "ts": "x"}])))

    def test_timer_domains_read_as_their_names(self) -> None:
        assert [str(d) for d in TimeDomain] == ["event_time", "processing_time"]
