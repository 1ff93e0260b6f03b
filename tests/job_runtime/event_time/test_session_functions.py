"""``reduce`` and ``process`` per session window, against both state backends: the
sessions are those the session aggregate finds (checked against a reference computed
in one go over shuffled records, through a restore at another parallelism), ``reduce``
folds each session's records, sessions that merge included, ``process`` sees each
session's records in event-time order, and neither function can change the state."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from keyed_operators import MAX_P, Operators, keyed_op_of, session_reference

from job_runtime import Pipeline, sinks, sources, watermarks, windows
from job_runtime.errors import UserCodeError
from job_runtime.operators.keyed_operator import KeyedOperator
from job_runtime.pipeline import KeyedKind, KeyedOp
from job_runtime.records import Batch, Record, key_group_of
from job_runtime.state.backend import BACKEND_KINDS
from job_runtime.watermarks import MAX_WATERMARK

GAP_MS = 1_000


def add(a: Record, b: Record) -> Record:
    a["amount"] += b["amount"]
    a["n"] = a.get("n", 1) + b.get("n", 1)
    return a


def summary(user: str, window: windows.Window, records: list[Record]) -> list[Record]:
    stamps = [r["ts"] for r in records]
    assert stamps == sorted(stamps), "a session's records come in event-time order"
    for r in records:
        r["amount"] = -1  # a copy: the stored record stays as it is
    return [{"user": user, "window_start": window.start, "window_end": window.end,
             "n": len(records), "first": stamps[0]}]


def session_function(kind: str, fn: Any, *, lateness: str = "0s") -> KeyedOp:
    p = Pipeline()
    windowed = (p.source(sources.sequence(count=1),
                         watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="1s"))
                .key_by("user").window(windows.session(gap=f"{GAP_MS}ms"),
                                       allowed_lateness=lateness))
    getattr(windowed, kind)(fn).sink(sinks.discard())
    return keyed_op_of(p)


@pytest.fixture(params=BACKEND_KINDS)
def operators(request: pytest.FixtureRequest, tmp_path: Path) -> Operators:
    return Operators(request.param, tmp_path)


def clicks(records: list[tuple[str, int, int]]) -> Batch:
    return Batch(arrow=pa.RecordBatch.from_pylist(
        [{"user": u, "ts": ts, "amount": a} for u, ts, a in records]))


def route(ops: list[KeyedOperator], records: list[tuple[str, int, int]]) -> list[Record]:
    out: list[Record] = []
    for o in ops:
        mine = [r for r in records if key_group_of(r[0], MAX_P) in o.key_groups]
        if mine:
            out += o.process(clicks(mine)).rows
    return out


def run_shuffled(operators: Operators, op: KeyedOp, seed: int
                 ) -> tuple[list[Record], pd.DataFrame]:
    """600 shuffled records over 12 keys, half before a restore from two subtasks into
    three, then the end of time: everything emitted, and the records."""
    rng = random.Random(seed)
    records = [(f"k{rng.randrange(12)}", rng.randrange(0, 60_000), rng.randrange(100))
               for _ in range(600)]
    rng.shuffle(records)
    ops = [operators.make(op, subtask=s, parallelism=2) for s in range(2)]
    emitted: list[Record] = []
    for i in range(0, 300, 50):
        emitted += route(ops, records[i:i + 50])
    ops = operators.restart(ops, parallelism=3, op=op)
    for i in range(300, 600, 50):
        emitted += route(ops, records[i:i + 50])
    for o in ops:
        emitted += o.on_watermark(MAX_WATERMARK).rows
        assert (o.key_count(), o.late_records) == (0, 0)
    return emitted, pd.DataFrame(records, columns=["user", "ts", "amount"])


@pytest.mark.parametrize("seed", [1, 2])
def test_reduce_gives_each_session_of_a_reference_its_folded_record(
        operators: Operators, seed: int) -> None:
    emitted, frame = run_shuffled(operators, session_function("reduce", add), seed)
    got = sorted((r["user"], r["window_start"], r["window_end"], r.get("n", 1),
                  float(r["amount"])) for r in emitted)
    assert got == session_reference(frame, GAP_MS)


@pytest.mark.parametrize("seed", [1, 2])
def test_process_sees_each_session_of_a_reference_whole_and_in_event_time_order(
        operators: Operators, seed: int) -> None:
    emitted, frame = run_shuffled(operators, session_function("process", summary), seed)
    got = sorted((r["user"], r["window_start"], r["window_end"], r["n"]) for r in emitted)
    assert got == [row[:4] for row in session_reference(frame, GAP_MS)]
    assert all(r["first"] == r["window_start"] for r in emitted)


def test_a_record_joining_two_sessions_reduces_all_three_into_one(
        operators: Operators) -> None:
    op = operators.make(session_function("reduce", add))
    op.process(clicks([("a", 0, 1), ("a", 1_800, 2)]))
    op.process(clicks([("a", 900, 4)]))  # less than a gap from both
    (row,) = op.on_watermark(MAX_WATERMARK).rows
    assert (row["window_start"], row["window_end"], row["n"], row["amount"]) == \
        (0, 2_800, 3, 7)


def test_a_late_record_within_the_lateness_fires_the_session_again_with_it(
        operators: Operators) -> None:
    op = operators.make(session_function("process", summary, lateness="5s"))
    op.process(clicks([("a", 1_000, 1)]))
    assert [r["n"] for r in op.on_watermark(2_500).rows] == [1]
    assert [r["n"] for r in op.process(clicks([("a", 1_500, 1)])).rows] == [2]


def test_the_functions_kinds_and_a_failing_function_in_the_users_operator(
        operators: Operators) -> None:
    assert session_function("reduce", add).kind == KeyedKind.SESSION_REDUCE
    assert session_function("process", summary).kind == KeyedKind.SESSION_PROCESS
    op = operators.make(session_function("process", lambda key, window, records: {"n": 1}))
    op.process(clicks([("a", 1, 1)]))
    with pytest.raises(UserCodeError) as raised:
        op.on_watermark(MAX_WATERMARK)
    assert "returned one record; it must return an iterable of records" in \
        raised.value.details
