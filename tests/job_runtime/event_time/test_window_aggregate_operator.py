"""The windowed ``aggregate`` on its own: windows fire once when the watermark reaches
their end, late records within the allowed lateness update their row, later ones are
counted and dropped, and a restore (at any parallelism) keeps all of that as if
nothing had failed: a record that was too late before is too late after, and a
window fires each key once."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from job_runtime import Pipeline, sinks, sources, watermarks, windows
from job_runtime.execution.stages import plan_stages
from job_runtime.operators.keyed import build_keyed_operator
from job_runtime.operators.keyed_operator import KeyedOperator
from job_runtime.records import Batch, key_group_range

MAX_P = 128


def window_op(*, size: str = "10s", lateness: str = "0s", every: str | None = None) -> Any:
    p = Pipeline()
    assigner = windows.tumbling(size) if every is None else windows.sliding(size, every=every)
    (p.source(sources.sequence(count=1),
              watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="1s"))
      .key_by("user")
      .window(assigner, allowed_lateness=lateness)
      .aggregate(n="count", total=("sum", "amount"))
      .sink(sinks.discard()))
    keyed = plan_stages(p)[1].keyed
    assert keyed is not None
    return keyed


def operator(op: Any, *, subtask: int = 0, parallelism: int = 1) -> KeyedOperator:
    return build_keyed_operator(op=op, subtask=subtask, max_parallelism=MAX_P,
                                key_groups=key_group_range(subtask, parallelism=parallelism,
                                                           max_parallelism=MAX_P))


def clicks(*rows: tuple[str, int, int]) -> Batch:
    return Batch(arrow=pa.RecordBatch.from_pylist(
        [{"user": u, "ts": ts, "amount": a} for u, ts, a in rows]))


def rows(batch: Batch) -> list[tuple[str, int, int, int, float]]:
    return sorted((r["user"], r["window_start"], r["window_end"], r["n"], r["total"])
                  for r in batch.rows)


def test_a_window_fires_once_when_the_watermark_reaches_its_last_millisecond() -> None:
    op = operator(window_op())
    assert rows(op.process(clicks(("a", 1_000, 1), ("b", 9_999, 2), ("a", 12_000, 4)))) == []
    assert rows(op.on_watermark(9_998)) == []
    assert rows(op.on_watermark(9_999)) == [("a", 0, 10_000, 1, 1.0), ("b", 0, 10_000, 1, 2.0)]
    assert rows(op.on_watermark(15_000)) == []
    assert rows(op.on_watermark(10**15)) == [("a", 10_000, 20_000, 1, 4.0)]


def test_records_after_the_lateness_are_counted_and_dropped_and_within_it_update_the_row() -> None:
    op = operator(window_op(lateness="5s"))
    op.process(clicks(("a", 1_000, 1)))
    assert rows(op.on_watermark(10_000)) == [("a", 0, 10_000, 1, 1.0)]
    # Late but within the lateness: the row again, updated, at once.
    assert rows(op.process(clicks(("a", 2_000, 10), ("b", 3_000, 5)))) == [
        ("a", 0, 10_000, 2, 11.0), ("b", 0, 10_000, 1, 5.0)]
    assert rows(op.on_watermark(14_998)) == []
    assert op.open_windows == [0]
    op.on_watermark(14_999)  # its last millisecond plus the lateness
    assert op.open_windows == []
    assert rows(op.process(clicks(("a", 4_000, 100), ("a", 16_000, 7)))) == []
    assert op.late_records == 1
    assert rows(op.on_watermark(19_999)) == [("a", 10_000, 20_000, 1, 7.0)]


def test_sliding_windows_count_each_record_in_every_window_covering_it() -> None:
    op = operator(window_op(size="20s", every="10s"))
    op.process(clicks(("a", 15_000, 1), ("a", 25_000, 2)))
    assert rows(op.on_watermark(10**15)) == [
        ("a", 0, 20_000, 1, 1.0), ("a", 10_000, 30_000, 2, 3.0), ("a", 20_000, 40_000, 1, 2.0)]


def restart(ops: list[KeyedOperator], *, parallelism: int, op: Any) -> list[KeyedOperator]:
    """Every operator's snapshot restored into ``parallelism`` new ones."""
    blobs = [o.snapshot().serialize() for o in ops]
    new = [operator(op, subtask=s, parallelism=parallelism) for s in range(parallelism)]
    for o in new:
        o.restore(blobs)
    return new


def route(ops: list[KeyedOperator], batch: Batch) -> list[Batch]:
    """Each record to the operator owning its key's group, as the exchange does."""
    from job_runtime.records import key_group_of

    out = []
    for o in ops:
        mine = [r for r in batch.rows if key_group_of(r["user"], MAX_P) in o.key_groups]
        if mine:
            out.append(o.process(Batch(rows=mine)))
    return out


@pytest.mark.parametrize(("before", "after"), [(1, 1), (2, 3), (3, 2)])
def test_after_a_restore_a_record_too_late_before_is_too_late_and_fired_keys_do_not_fire_again(
        before: int, after: int) -> None:
    op = window_op()
    users = [f"u{i}" for i in range(40)]
    ops = [operator(op, subtask=s, parallelism=before) for s in range(before)]
    route(ops, clicks(*[(u, 1_000, 1) for u in users], *[(u, 11_000, 2) for u in users]))
    # Subtasks' watermarks differ: subtask 0 fired window 0 before the checkpoint.
    fired_before = rows(ops[0].on_watermark(12_000))
    assert {r[1] for r in fired_before} == {0}

    new = restart(ops, parallelism=after, op=op)
    # The replay after the restore: records of window 0 again, before any watermark.
    replayed = [(u, 2_000, 100) for u in users]
    late_firings = [r for b in route(new, clicks(*replayed)) for r in rows(b)]
    assert late_firings == [], "a fired window was opened again"
    fired_users = {r[0] for r in fired_before}
    assert sum(o.late_records for o in new) == len(fired_users), \
        "every replayed record of a key that fired window 0 is late"
    fired_after = [r for o in new for r in rows(o.on_watermark(10**15))]
    emitted = fired_before + fired_after
    per_window = {}
    for user, start, *_ in emitted:
        per_window[(user, start)] = per_window.get((user, start), 0) + 1
    assert all(n == 1 for n in per_window.values()), "a key's window fired twice"
    assert set(per_window) == {(u, s) for u in users for s in (0, 10_000)}
    # Keys that had not fired window 0 count the replayed record in it.
    for _user, start, _, n, total in fired_after:
        if start == 0:
            assert (n, total) == (2, 101.0)


def test_event_time_that_is_missing_or_not_a_time_is_one_line() -> None:
    from job_runtime.errors import UserCodeError

    op = operator(window_op())
    with pytest.raises(UserCodeError, match="event-time column 'ts' is not in the records"):
        op.process(Batch(rows=[{"user": "a", "amount": 1}]))
    with pytest.raises(UserCodeError, match="is string; it must be a timestamp or an integer"):
        op.process(Batch(rows=[{"user": "a", "ts": "yesterday", "amount": 1}]))
    with pytest.raises(UserCodeError, match="1 records have no event time"):
        op.process(Batch(rows=[{"user": "a", "ts": None, "amount": 1},
                               {"user": "b", "ts": 5, "amount": 1}]))


def test_a_timestamp_column_gives_timestamp_window_bounds() -> None:
    import datetime as dt

    op = operator(window_op())
    at = dt.datetime(2026, 1, 1, 0, 0, 5, tzinfo=dt.UTC)
    op.process(Batch(arrow=pa.RecordBatch.from_pylist(
        [{"user": "a", "ts": at, "amount": 3}],
        schema=pa.schema([("user", pa.string()), ("ts", pa.timestamp("us", tz="UTC")),
                          ("amount", pa.int64())]))))
    fired = op.on_watermark(10**15).arrow
    assert fired.schema.field("window_start").type == pa.timestamp("ms", tz="UTC")
    assert fired.column("window_end")[0].as_py() == dt.datetime(2026, 1, 1, 0, 0, 10,
                                                                  tzinfo=dt.UTC)
