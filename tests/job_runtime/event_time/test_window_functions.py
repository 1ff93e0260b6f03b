"""``reduce`` and ``process`` per tumbling or sliding window, against both state
backends: each window fires once per key when the watermark reaches its last
millisecond, whatever order its records came in; sliding windows give a record to
each of its windows; late records within the allowed lateness fire the window again,
later ones are counted and dropped; a restore at another parallelism fires each
window once, on the subtask of its key; and user functions that fail, or bad
definitions, are reported as such."""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from keyed_operators import MAX_P, Operators, keyed_op_of

from job_runtime import Pipeline, sinks, sources, watermarks, windows
from job_runtime.errors import PipelineDefinitionError, UserCodeError
from job_runtime.execution.stages import plan_stages, source_batch_size
from job_runtime.operators.keyed_operator import KeyedOperator
from job_runtime.operators.window_function import WindowFunctionOperator, _chunks
from job_runtime.pipeline import KeyedOp
from job_runtime.records import Batch, Record, key_group_of
from job_runtime.sources.source_contract import RECORD_BATCH_SIZE
from job_runtime.state.backend import BACKEND_KINDS
from job_runtime.watermarks import MAX_WATERMARK
from job_runtime.windows import Window, WindowAssigner


def add_amounts(accumulated: Record, record: Record) -> Record:
    return {**accumulated, "amount": accumulated["amount"] + record["amount"]}


def amounts(key: Any, window: Window, records: list[Record]) -> list[Record]:
    return [{"user": key, "start": window.start, "end": window.end,
             "amounts": [r["amount"] for r in records]}]


def window_op(kind: str = "reduce", *, assigner: WindowAssigner | None = None,
              lateness: str = "0s", fn: Callable[..., Any] | None = None,
              name: str | None = None) -> KeyedOp:
    p = Pipeline()
    windowed = (p.source(sources.sequence(count=1),
                         watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="1s"))
                .key_by("user")
                .window(assigner or windows.tumbling("10s"), allowed_lateness=lateness))
    if kind == "reduce":
        stream = windowed.reduce(fn or add_amounts, name=name)
    else:
        stream = windowed.process(fn or amounts, name=name)
    stream.sink(sinks.discard())
    return keyed_op_of(p)


@pytest.fixture(params=BACKEND_KINDS)
def operators(request: pytest.FixtureRequest, tmp_path: Path) -> Operators:
    return Operators(request.param, tmp_path)


def clicks(*rows: tuple[str, int, int], arrow: bool = True) -> Batch:
    records = [{"user": u, "ts": ts, "amount": a} for u, ts, a in rows]
    return Batch(arrow=pa.RecordBatch.from_pylist(records)) if arrow else Batch(rows=records)


Reduced = tuple[str, int, int, int]
"""``(user, window_start, window_end, amount)`` of a reduced window."""
Processed = tuple[str, int, int, tuple[int, ...]]
"""``(user, start, end, amounts)`` of a processed window."""


def reduced(batch: Batch) -> list[Reduced]:
    return sorted((r["user"], r["window_start"], r["window_end"], r["amount"])
                  for r in batch.rows)


def processed(batch: Batch) -> list[Processed]:
    return sorted((r["user"], r["start"], r["end"], tuple(r["amounts"])) for r in batch.rows)


def owner(ops: list[KeyedOperator], user: str) -> KeyedOperator:
    return next(o for o in ops if key_group_of(user, MAX_P) in o.key_groups)


def route(ops: list[KeyedOperator], *records: tuple[str, int, int]) -> list[Record]:
    """Each record to the operator owning its key's group, as the exchange does."""
    out: list[Record] = []
    for o in ops:
        mine = [r for r in records if key_group_of(r[0], MAX_P) in o.key_groups]
        if mine:
            out += o.process(clicks(*mine)).rows
    return out


class TestReduce:
    def test_each_key_and_window_fires_once_when_the_watermark_reaches_its_last_millisecond(
            self, operators: Operators) -> None:
        op = operators.make(window_op())
        assert reduced(op.process(clicks(("a", 1_000, 1), ("b", 12_000, 5),
                                         ("a", 4_000, 2), ("a", 15_000, 4)))) == []
        assert reduced(op.on_watermark(9_998)) == []
        assert reduced(op.on_watermark(9_999)) == [("a", 0, 10_000, 3)]
        assert reduced(op.on_watermark(19_999)) == [("a", 10_000, 20_000, 4),
                                                     ("b", 10_000, 20_000, 5)]
        assert reduced(op.on_watermark(MAX_WATERMARK)) == []
        assert op.key_count() == 0, "fired windows without lateness are dropped"

    def test_out_of_order_records_land_in_their_own_windows(self, operators: Operators) -> None:
        op = operators.make(window_op())
        op.process(clicks(("a", 25_000, 1), ("a", 3_000, 10)))
        op.process(clicks(("a", 21_000, 100), ("a", 9_999, 1_000), ("a", 10_000, 7)))
        assert reduced(op.on_watermark(MAX_WATERMARK)) == [
            ("a", 0, 10_000, 1_010), ("a", 10_000, 20_000, 7), ("a", 20_000, 30_000, 101)]

    def test_the_result_is_the_accumulated_record_with_the_window_bounds(
            self, operators: Operators) -> None:
        calls: list[tuple[Record, Record]] = []

        def keep_latest(accumulated: Record, record: Record) -> Record:
            calls.append((dict(accumulated), dict(record)))
            return {**record, "seen": accumulated.get("seen", 1) + 1}

        op = operators.make(window_op(fn=keep_latest))
        op.process(clicks(("a", 1_000, 1), ("b", 2_000, 5)))
        op.process(clicks(("a", 3_000, 2)))
        fired = op.on_watermark(MAX_WATERMARK).rows
        assert sorted(fired, key=lambda r: r["user"]) == [
            {"user": "a", "ts": 3_000, "amount": 2, "seen": 2,
             "window_start": 0, "window_end": 10_000},
            {"user": "b", "ts": 2_000, "amount": 5, "window_start": 0, "window_end": 10_000}]
        assert calls == [({"user": "a", "ts": 1_000, "amount": 1},
                          {"user": "a", "ts": 3_000, "amount": 2})], \
            "a window's first record is its first accumulated value"

    def test_a_function_that_changes_the_accumulated_record_in_place_is_safe(
            self, operators: Operators) -> None:
        def add_in_place(accumulated: Record, record: Record) -> Record:
            accumulated["amount"] += record["amount"]
            return accumulated

        op = operators.make(window_op(fn=add_in_place,
                                      assigner=windows.sliding("10s", every="5s")))
        op.process(clicks(("a", 6_000, 1), ("a", 7_000, 10)))
        op.process(clicks(("a", 11_000, 100)))
        assert reduced(op.on_watermark(MAX_WATERMARK)) == [
            ("a", 0, 10_000, 11), ("a", 5_000, 15_000, 111), ("a", 10_000, 20_000, 100)]

    def test_a_timestamp_column_gives_utc_datetime_bounds(self, operators: Operators) -> None:
        op = operators.make(window_op())
        at = dt.datetime(2026, 1, 1, 0, 0, 5, tzinfo=dt.UTC)
        op.process(Batch(arrow=pa.RecordBatch.from_pylist(
            [{"user": "a", "ts": at, "amount": 3}],
            schema=pa.schema([("user", pa.string()), ("ts", pa.timestamp("us", tz="UTC")),
                              ("amount", pa.int64())]))))
        fired = op.on_watermark(MAX_WATERMARK)
        start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        assert [(r["window_start"], r["window_end"]) for r in fired.rows] == [
            (start, start + dt.timedelta(seconds=10))]
        assert fired.arrow.schema.field("window_start").type == pa.timestamp("us", tz="UTC")

    def test_records_given_as_rows_are_windowed_alike(self, operators: Operators) -> None:
        op = operators.make(window_op())
        op.process(clicks(("a", 5_000, 1), ("a", 1_000, 2), arrow=False))
        assert reduced(op.on_watermark(MAX_WATERMARK)) == [("a", 0, 10_000, 3)]


class TestProcess:
    def test_the_function_gets_the_key_the_window_and_its_records_in_arrival_order(
            self, operators: Operators) -> None:
        op = operators.make(window_op("process"))
        op.process(clicks(("a", 8_000, 1), ("b", 1_000, 9), ("a", 2_000, 2)))
        op.process(clicks(("a", 5_000, 3), ("a", 12_000, 4)))
        assert processed(op.on_watermark(9_999)) == [("a", 0, 10_000, (1, 2, 3)),
                                                      ("b", 0, 10_000, (9,))]
        assert processed(op.on_watermark(MAX_WATERMARK)) == [("a", 10_000, 20_000, (4,))]

    def test_the_function_may_emit_several_records_or_none(self, operators: Operators) -> None:
        def each_big_one(key: Any, window: Window, records: list[Record]) -> list[Record] | None:
            big = [{"user": key, "amount": r["amount"]} for r in records if r["amount"] > 5]
            return big or None

        op = operators.make(window_op("process", fn=each_big_one))
        op.process(clicks(("a", 1_000, 10), ("a", 2_000, 1), ("a", 3_000, 20), ("b", 1, 1)))
        assert op.on_watermark(MAX_WATERMARK).rows == [{"user": "a", "amount": 10},
                                                        {"user": "a", "amount": 20}]

    def test_what_the_function_does_to_its_records_does_not_reach_the_state(
            self, operators: Operators) -> None:
        def drain(key: Any, window: Window, records: list[Record]) -> list[Record]:
            out = [{"user": key, "n": len(records), "first": records[0]["amount"]}]
            records[0]["amount"] = -1
            records.clear()
            return out

        op = operators.make(window_op("process", fn=drain, lateness="10s"))
        op.process(clicks(("a", 1_000, 7)))
        assert op.on_watermark(9_999).rows == [{"user": "a", "n": 1, "first": 7}]
        assert op.process(clicks(("a", 2_000, 8))).rows == [{"user": "a", "n": 2, "first": 7}]

    def test_the_window_is_a_small_frozen_value(self) -> None:
        window = Window(0, 10_000)
        assert (window.start, window.end) == (0, 10_000)
        assert window == Window(start=0, end=10_000)
        with pytest.raises(dataclasses.FrozenInstanceError):
            window.start = 5  # type: ignore[misc]


class TestSlidingWindows:
    def test_each_record_goes_to_size_over_every_windows(self, operators: Operators) -> None:
        op = operators.make(window_op("process",
                                      assigner=windows.sliding("10s", every="5s")))
        op.process(clicks(("a", 7_000, 1), ("a", 12_000, 2), ("a", 4_999, 3)))
        assert processed(op.on_watermark(MAX_WATERMARK)) == [
            ("a", -5_000, 5_000, (3,)), ("a", 0, 10_000, (1, 3)),
            ("a", 5_000, 15_000, (1, 2)), ("a", 10_000, 20_000, (2,))]

    def test_sliding_windows_fire_as_the_watermark_reaches_each_end(
            self, operators: Operators) -> None:
        op = operators.make(window_op(assigner=windows.sliding("3s", every="1s")))
        op.process(clicks(("a", 2_500, 1), ("a", 3_500, 10)))
        assert reduced(op.on_watermark(2_999)) == [("a", 0, 3_000, 1)]
        assert reduced(op.on_watermark(3_999)) == [("a", 1_000, 4_000, 11)]
        assert reduced(op.on_watermark(5_999)) == [("a", 2_000, 5_000, 11),
                                                    ("a", 3_000, 6_000, 10)]


class TestLateness:
    @pytest.mark.parametrize("kind", ["reduce", "process"])
    def test_late_records_within_the_lateness_update_the_window_and_fire_it_again_at_once(
            self, operators: Operators, kind: str) -> None:
        op = operators.make(window_op(kind, lateness="5s"))
        op.process(clicks(("a", 1_000, 1)))
        assert len(op.on_watermark(10_000).rows) == 1
        late = op.process(clicks(("a", 500, 10), ("a", 900, 100)))
        if kind == "reduce":
            assert reduced(late) == [("a", 0, 10_000, 111)]
        else:
            assert processed(late) == [("a", 0, 10_000, (1, 10, 100))]
        assert op.on_watermark(14_000).rows == [], "a fired window does not fire again"
        assert isinstance(op, WindowFunctionOperator)
        assert op.open_windows() == [("a", 0, True)]
        op.on_watermark(14_999)  # its last millisecond plus the lateness
        assert op.open_windows() == []
        assert op.late_records == 0

    def test_records_later_than_the_lateness_are_counted_and_dropped(
            self, operators: Operators) -> None:
        op = operators.make(window_op(lateness="5s"))
        op.process(clicks(("a", 1_000, 1)))
        op.on_watermark(15_000)  # past 9 999 + 5 000: the window is gone
        assert op.process(clicks(("a", 500, 100), ("b", 9_000, 1))).rows == []
        assert op.late_records == 2
        op.on_watermark(21_000)
        # Late, within the lateness, for a window the key never opened: it fires at once.
        assert reduced(op.process(clicks(("c", 12_000, 3)))) == [("c", 10_000, 20_000, 3)]
        assert reduced(op.on_watermark(MAX_WATERMARK)) == []

    def test_a_sliding_record_late_for_its_oldest_window_still_lands_in_the_newer_ones(
            self, operators: Operators) -> None:
        op = operators.make(window_op("process", assigner=windows.sliding("10s", every="5s")))
        op.on_watermark(10_000)
        assert op.process(clicks(("a", 7_000, 1))).rows == [], "[5 s, 15 s) is still open"
        assert op.late_records == 1, "counted once, for the window [0, 10 s) it missed"
        assert processed(op.on_watermark(MAX_WATERMARK)) == [("a", 5_000, 15_000, (1,))]


class TestRestore:
    @pytest.mark.parametrize("kind", ["reduce", "process"])
    def test_after_a_restore_at_another_parallelism_each_window_fires_once_on_its_subtask(
            self, operators: Operators, kind: str) -> None:
        op = window_op(kind, lateness="5s")
        users = [f"user-{i}" for i in range(30)]
        old = [operators.make(op, subtask=s, parallelism=2) for s in range(2)]
        # Per user: a record in [0, 10 s) (fired on subtask 0 only, so that the
        # subtasks' watermarks differ) and one in [30 s, 40 s).
        route(old, *[(u, 1_000, 1) for u in users],
              *[(u, 30_000 + i, 2) for i, u in enumerate(users)])
        fired_before = old[0].on_watermark(12_000).rows
        assert fired_before and len(fired_before) < len(users)
        new = operators.restart(old, parallelism=3, op=op)

        after: list[Record] = []
        for o in new:
            fired = o.on_watermark(MAX_WATERMARK).rows
            assert all(owner(new, r["user"]) is o for r in fired)
            after += fired
        emitted = Batch(rows=fired_before + after)
        if kind == "reduce":
            assert reduced(emitted) == sorted(
                [(u, 0, 10_000, 1) for u in users] + [(u, 30_000, 40_000, 2) for u in users])
        else:
            assert processed(emitted) == sorted(
                [(u, 0, 10_000, (1,)) for u in users]
                + [(u, 30_000, 40_000, (2,)) for u in users])

    def test_a_fired_window_kept_for_lateness_takes_late_records_after_a_restore(
            self, operators: Operators) -> None:
        op = window_op(lateness="5s")
        old = [operators.make(op)]
        old[0].process(clicks(("a", 1_000, 1)))
        assert reduced(old[0].on_watermark(10_000)) == [("a", 0, 10_000, 1)]
        new = operators.restart(old, parallelism=2, op=op)
        assert reduced(Batch(rows=route(new, ("a", 500, 4)))) == [("a", 0, 10_000, 5)]
        assert [r for o in new for r in o.on_watermark(MAX_WATERMARK).rows] == []

    @pytest.mark.parametrize("kind", ["reduce", "process"])
    def test_a_record_too_late_before_the_checkpoint_is_too_late_when_replayed_after_it(
            self, operators: Operators, kind: str) -> None:
        op = window_op(kind)
        old = [operators.make(op, subtask=s, parallelism=2) for s in range(2)]
        users = [f"user-{i}" for i in range(20)]
        route(old, *[(u, 1_000, 1) for u in users])
        fired_before = [r for o in old for r in o.on_watermark(20_000).rows]
        assert len(fired_before) == len(users)
        new = operators.restart(old, parallelism=3, op=op)
        # The watermark restarts from the minimum; the replayed records are still late.
        assert route(new, *[(u, 2_000, 7) for u in users]) == []
        assert sum(o.late_records for o in new) == len(users)
        assert [r for o in new for r in o.on_watermark(MAX_WATERMARK).rows] == []

    def test_windows_restored_before_any_record_keep_datetime_bounds(
            self, operators: Operators) -> None:
        op = window_op()
        old = operators.make(op)
        at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        old.process(Batch(arrow=pa.RecordBatch.from_pylist(
            [{"user": "a", "ts": at, "amount": 1}],
            schema=pa.schema([("user", pa.string()), ("ts", pa.timestamp("ms", tz="UTC")),
                              ("amount", pa.int64())]))))
        restored = operators.make(op)
        restored.restore([operators.checkpoint(old)])
        assert [r["window_start"] for r in restored.on_watermark(MAX_WATERMARK).rows] == [at]


def reference(frame: pd.DataFrame, *, size: int, slide: int) -> list[tuple[str, int, int, int]]:
    """``(user, start, count, total)`` per key and window, computed in one go: each
    record repeated once per window it falls in."""
    last = frame["ts"] - frame["ts"] % slide
    parts = [frame.assign(start=last - back * slide) for back in range(size // slide)]
    exploded = pd.concat(parts)
    grouped = exploded.groupby(["user", "start"]).agg(n=("amount", "size"),
                                                      total=("amount", "sum"))
    return sorted((user, int(start), int(r.n), int(r.total))
                  for (user, start), r in zip(grouped.index, grouped.itertuples(),
                                              strict=True))


class TestAgainstAReference:
    @pytest.mark.parametrize(("size", "slide", "seed"),
                             [(1_000, 1_000, 1), (1_000, 1_000, 2), (3_000, 1_000, 3),
                              (2_000, 500, 4)])
    def test_out_of_order_records_with_a_checkpoint_between_give_the_windows_of_a_reference(
            self, operators: Operators, size: int, slide: int, seed: int) -> None:
        rng = random.Random(seed)
        delay = 2_000
        # Event times that grow, each record up to ``delay`` out of order, as the
        # source's watermarks promise; the watermark follows them.
        records = [(f"k{rng.randrange(8)}", i * 50 + rng.randrange(delay), rng.randrange(100))
                   for i in range(800)]
        assigner = windows.sliding(f"{size}ms", every=f"{slide}ms")

        def count_and_sum(key: Any, window: Window, rows: list[Record]) -> list[Record]:
            return [{"user": key, "start": window.start, "n": len(rows),
                     "total": sum(r["amount"] for r in rows)}]

        emitted: list[tuple[str, int, int, int]] = []
        for kind in ("process", "reduce"):
            op = window_op(kind, assigner=assigner,
                           fn=count_and_sum if kind == "process" else add_amounts)
            ops = [operators.make(op, subtask=s, parallelism=2) for s in range(2)]
            fired: list[Record] = []
            newest = 0
            for i in range(0, len(records), 40):
                if i == len(records) // 2:
                    ops = operators.restart(ops, parallelism=3, op=op)
                chunk = records[i:i + 40]
                fired += route(ops, *chunk)
                newest = max([newest, *(ts for _, ts, _ in chunk)])
                for o in ops:
                    fired += o.on_watermark(newest - delay - 1).rows
            for o in ops:
                fired += o.on_watermark(MAX_WATERMARK).rows
            assert all(o.late_records == 0 for o in ops)
            for o in ops:
                assert isinstance(o, WindowFunctionOperator)
                assert (o.key_count(), len(o.timers)) == (0, 0), "nothing is left behind"
            if kind == "process":
                emitted = sorted((r["user"], r["start"], r["n"], r["total"]) for r in fired)
            else:
                sums = sorted((r["user"], r["window_start"], r["amount"]) for r in fired)
                assert sums == [(u, s, t) for u, s, _, t in emitted]
        frame = pd.DataFrame(records, columns=["user", "ts", "amount"])
        assert emitted == reference(frame, size=size, slide=slide)


class TestUserErrors:
    def test_a_reduce_function_that_raises_is_the_operators_user_code_error(
            self, operators: Operators) -> None:
        def broken(accumulated: Record, record: Record) -> Record:
            raise ZeroDivisionError("no")

        op = operators.make(window_op(fn=broken, name="sums"))
        op.process(clicks(("a", 1_000, 1)))
        with pytest.raises(UserCodeError) as raised:
            op.process(clicks(("a", 2_000, 1)))
        assert raised.value.operator == "sums"
        assert "ZeroDivisionError: no" in raised.value.details

    def test_a_process_function_that_raises_fails_where_the_window_fires(
            self, operators: Operators) -> None:
        def broken(key: Any, window: Window, records: list[Record]) -> list[Record]:
            raise KeyError("missing")

        op = operators.make(window_op("process", fn=broken, name="per-window"))
        op.process(clicks(("a", 1_000, 1)))
        with pytest.raises(UserCodeError) as raised:
            op.on_watermark(MAX_WATERMARK)
        assert raised.value.operator == "per-window"
        assert "KeyError: 'missing'" in raised.value.details

    def test_a_reduce_function_that_returns_no_record_says_so(
            self, operators: Operators) -> None:
        op = operators.make(window_op(fn=lambda a, r: a["amount"] + r["amount"], name="sums"))
        with pytest.raises(UserCodeError, match="must return a record") as raised:
            op.process(clicks(("a", 1_000, 1), ("a", 2_000, 1)))
        assert raised.value.operator == "sums"

    def test_a_process_function_that_returns_one_record_says_so(
            self, operators: Operators) -> None:
        op = operators.make(window_op("process", fn=lambda k, w, rs: {"user": k}))
        op.process(clicks(("a", 1_000, 1)))
        with pytest.raises(UserCodeError, match="iterable of records"):
            op.on_watermark(MAX_WATERMARK)

    def test_a_record_without_its_event_time_is_one_line_naming_the_column(
            self, operators: Operators) -> None:
        op = operators.make(window_op())
        with pytest.raises(UserCodeError, match="event-time column 'ts' is not in the records"):
            op.process(Batch(arrow=pa.RecordBatch.from_pylist([{"user": "a", "amount": 1}])))


class TestDefinition:
    @pytest.mark.parametrize("kind", ["reduce", "process"])
    def test_window_functions_take_records_without_a_combiner(self, kind: str) -> None:
        op = window_op(kind)
        assert (op.kind, op.vectorised, op.uid) == (f"window_{kind}", False,
                                                     f"02-window_{kind}")
        p = Pipeline()
        windowed = (p.source(sources.sequence(count=1),
                             watermarks=watermarks.bounded_out_of_orderness("ts", max_delay=1))
                    .key_by("user").window(windows.tumbling("1m")))
        (windowed.reduce(add_amounts) if kind == "reduce" else windowed.process(amounts)) \
            .sink(sinks.discard())
        assert plan_stages(p)[0].combine is None
        assert source_batch_size(p) == RECORD_BATCH_SIZE

    @pytest.mark.parametrize("kind", ["reduce", "process"])
    def test_a_function_that_is_not_callable_is_one_line(self, kind: str) -> None:
        p = Pipeline()
        windowed = (p.source(sources.sequence(count=1),
                             watermarks=watermarks.bounded_out_of_orderness("ts", max_delay=1))
                    .key_by("user").window(windows.tumbling("1m")))
        with pytest.raises(PipelineDefinitionError, match=f"{kind}\\(\\) needs a function") \
                as raised:
            getattr(windowed, kind)("amount")
        assert "\n" not in str(raised.value)


def test_windows_stored_as_one_flat_tuple_of_records_still_fire_whole() -> None:
    """State written before a window's records were kept in chunks (one per batch)."""
    flat = ({"user": "a", "amount": 1}, {"user": "a", "amount": 2})
    assert _chunks(flat) == (flat,)
    assert _chunks((flat, ({"user": "a", "amount": 3},))) == (flat, ({"user": "a", "amount": 3},))
    assert _chunks(None) == ()
