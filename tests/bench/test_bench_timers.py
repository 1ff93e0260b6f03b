"""The timers benchmark's alert semantics, reference and check, and both sides on tiny data.

What an alert is (a run of a user's records, in event-time order, less than the gap
apart; one row when the watermark passes the run's newest event time plus the gap),
that the pandas reference computes exactly that across files, that our
``process()``/``on_timer`` job and the Spark processor's run merging reach it from an
out-of-order stream whose watermark lags, and that the check refuses a wrong alert.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.__main__ import BENCHMARKS, build_parser
from bench.common import BenchmarkError
from bench.timers import check_alerts, read_alerts, reference, resolve_scale
from bench.timers_job import GAP_MS, inactivity_alerts
from bench.timers_ss import merge_runs
from bench.windows_data import BASE_MS, SCHEMA, UNKNOWN_USER
from job_runtime import Pipeline
from job_runtime.execution.stages import plan_stages
from job_runtime.operators.keyed import build_keyed_operator
from job_runtime.records import Batch

MAX_P = 128
T = BASE_MS
S = 1000

# u1: two records 29.999 s apart (one run), then one exactly 30 s after the newest (a new
# run), which arrives first (out of order); u2: a record between two runs that joins
# them; u3: one record.
RECORDS = [("u1", 5, T + 29_999 + 30_000), ("u1", 1, T), ("u2", 7, T),
           ("u2", 2, T + 50 * S), ("u1", 3, T + 29_999), ("u3", 9, T + 10 * S),
           ("u2", 4, T + 25 * S)]
EXPECTED = pd.DataFrame({
    "user": [1, 1, 2, 3],
    "alert_at": [T + 29_999 + GAP_MS, T + 59_999 + GAP_MS, T + 50 * S + GAP_MS,
                 T + 10 * S + GAP_MS],
    "n": [2, 1, 3, 1], "total": [4, 5, 13, 9]})


def _write(path: Path, rows: list[tuple[str, int, int]]) -> Path:
    users, amounts, ts = zip(*rows, strict=True)
    pq.write_table(pa.table([pa.array(users), pa.array(amounts, pa.int64()),
                             pa.array(ts, pa.int64())], schema=SCHEMA), path)
    return path


def test_the_reference_splits_a_users_records_where_the_gap_is_reached(tmp_path: Path) -> None:
    paths = [_write(tmp_path / "a.parquet", RECORDS[:3]),
             _write(tmp_path / "b.parquet", RECORDS[3:])]
    got = reference(paths).sort_values(["user", "alert_at"], ignore_index=True)
    pd.testing.assert_frame_equal(got, EXPECTED)
    assert reference([]).empty


def test_an_output_equal_to_the_reference_passes_and_a_wrong_alert_is_refused() -> None:
    assert check_alerts(EXPECTED, EXPECTED.iloc[::-1]) == []
    wrong_sum = EXPECTED.copy()
    wrong_sum.loc[2, "total"] = 14
    assert check_alerts(EXPECTED, wrong_sum)[0].startswith(
        "1 alerts with a wrong count or sum (u2")
    late = EXPECTED.copy()
    late.loc[0, "alert_at"] += 1
    problems = check_alerts(EXPECTED, late)
    assert problems[0].startswith("1 of 4 alerts missing (u1")
    assert problems[1].startswith("1 alerts the input does not raise")
    assert check_alerts(EXPECTED, pd.concat([EXPECTED, EXPECTED.iloc[:1]]))[0].startswith(
        "1 alerts raised more than once")
    stranger = pd.concat([EXPECTED, pd.DataFrame({"user": [UNKNOWN_USER], "alert_at": [T],
                                                  "n": [1], "total": [1]})])
    assert check_alerts(EXPECTED, stranger) == [
        "1 alerts of a user that is not in the input"]


def test_alerts_read_back_from_files_with_the_user_as_its_number(tmp_path: Path) -> None:
    path = tmp_path / "part-0.parquet"
    pq.write_table(pa.table({"user": ["u1", "x"], "alert_at": [T, T], "n": [1, 2],
                             "total": [3, 4]}), path)
    assert read_alerts([path])["user"].tolist() == [1, UNKNOWN_USER]


def _process_op() -> Any:
    p = Pipeline(args={"input": "unused", "output": "unused"})
    inactivity_alerts(p)
    return plan_stages(p)[1].keyed


def test_our_job_raises_the_reference_alerts_from_an_out_of_order_stream() -> None:
    """The watermark lags well behind the records (a whole input ahead of it), as a slow
    source subtask makes it: a record of a user's next run comes before the current
    run's alert is due, and a later record joins two runs."""
    op = build_keyed_operator(op=_process_op(), subtask=0, max_parallelism=MAX_P,
                              key_groups=range(MAX_P))
    out = op.process(Batch(rows=[{"user": u, "amount": a, "ts": ts} for u, a, ts in RECORDS]))
    assert out.rows == []
    early = op.on_watermark(T + 29_999 + GAP_MS - 1)
    rows = [*early.rows, *op.on_watermark(2**62).rows]
    got = pd.DataFrame({"user": [int(r["user"][1:]) for r in rows],
                        "alert_at": [r["alert_at"] for r in rows],
                        "n": [r["n"] for r in rows], "total": [r["total"] for r in rows]})
    assert [r["user"] for r in early.rows] == ["u3"]
    assert check_alerts(EXPECTED, got) == []


def test_the_spark_processors_merge_gives_the_references_runs() -> None:
    """All of a user's rows of a micro-batch at once, into the runs state holds."""
    u1 = [r for r in RECORDS if r[0] == "u1"]
    runs = merge_runs([], np.array([u1[0][2]]), np.array([u1[0][1]]), gap=GAP_MS)
    runs = merge_runs(runs, np.array([r[2] for r in u1[1:]]), np.array([r[1] for r in u1[1:]]),
                      gap=GAP_MS)
    assert runs == [(T, T + 29_999, 2, 4), (T + 59_999, T + 59_999, 1, 5)]
    u2 = merge_runs([(T, T, 1, 7), (T + 50 * S, T + 50 * S, 1, 2)], np.array([T + 25 * S]),
                    np.array([4]), gap=GAP_MS)
    assert u2 == [(T, T + 50 * S, 3, 13)]


def _ns(*args: str) -> argparse.Namespace:
    return build_parser().parse_args(["timers", *args])


def test_timers_is_a_benchmark_with_a_quick_scale_and_refuses_late_records(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BENCH_TIMERS_RECORDS", "BENCH_KEYS", "BENCH_REPEAT"):
        monkeypatch.delenv(name, raising=False)
    assert BENCHMARKS["timers"] == "bench.timers"
    scale = resolve_scale(_ns())
    assert (scale.spec.records, scale.spec.keys, scale.repeat) == (2_000_000, 100_000, 3)
    quick = resolve_scale(_ns("--quick"))
    assert (quick.spec.records, quick.spec.keys, quick.repeat) == (200_000, 10_000, 1)
    with pytest.raises(BenchmarkError, match="must exceed the disorder"):
        resolve_scale(_ns("--disorder", "5", "--watermark-delay", "5"))
