"""The windows benchmark's data, reference and checks, without either engine.

What the input promises (deterministic, out of order by at most the disorder, skewed
users), that the pandas reference counts and sums per user and minute, what the check
refuses (a window missing, repeated, extra or wrong), which windows the latency leaves
out, how Structured Streaming's committed files are read from its sink log, and which
of its batches the steady rate counts.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.__main__ import BENCHMARKS, build_parser
from bench.common import BenchmarkError
from bench.windows import resolve_scale, steady
from bench.windows_data import (
    BASE_MS,
    END_USER,
    SCHEMA,
    UNKNOWN_USER,
    WINDOW_MS,
    DataSpec,
    OutputWatcher,
    check_windows,
    file_table,
    generate,
    link_input,
    measured_cut,
    ours_committed,
    read_output,
    reference,
    spark_committed,
    spark_log_entries,
    user_ids,
    window_latencies,
)
from bench.windows_ss import Batch, QueryRun, dump, files_for, parse

SPEC = DataSpec(records=25_000, keys=500, file_records=5_000, disorder_ms=3000)


def test_the_input_is_the_same_every_time_and_each_file_continues_the_stream() -> None:
    first, again = file_table(SPEC, 1), file_table(SPEC, 1)
    assert first.equals(again)
    assert first.schema == SCHEMA and first.num_rows == 5_000
    whole = pa.concat_tables([file_table(SPEC, i) for i in range(SPEC.files)])
    ts = whole["ts"].to_numpy()
    position = np.arange(SPEC.records)
    delay = BASE_MS + position * 1000 // SPEC.events_per_second - ts
    assert delay.min() >= 0 and delay.max() <= SPEC.disorder_ms
    assert delay.max() > SPEC.disorder_ms // 2  # out of order, not merely shifted
    # No record is older than the newest before it by more than the disorder: a
    # watermark delay above it leaves none late.
    newest_before = np.maximum.accumulate(ts)[:-1]
    assert (newest_before - ts[1:]).max() <= SPEC.disorder_ms
    assert (newest_before - ts[1:]).max() > 0


def test_users_are_zipf_skewed_strings() -> None:
    users = file_table(SPEC, 0)["user"].to_pylist()
    counts = pd.Series(users).value_counts()
    assert counts.index[0] == "u0"
    assert counts.iloc[0] > 5 * counts.get("u9", 0)
    assert all(u.startswith("u") for u in users)


def test_user_ids_read_the_number_and_flag_anything_else() -> None:
    ids = user_ids(pa.array(["u0", "u123", END_USER, "x7", None]))
    assert ids.tolist() == [0, 123, UNKNOWN_USER, UNKNOWN_USER, UNKNOWN_USER]


def _write(path: Path, rows: list[tuple[str, int, int]]) -> Path:
    users, amounts, ts = zip(*rows, strict=True)
    pq.write_table(pa.table([pa.array(users), pa.array(amounts, pa.int64()),
                             pa.array(ts, pa.int64())], schema=SCHEMA), path)
    return path


def test_the_reference_counts_and_sums_per_user_and_minute_across_files(tmp_path: Path) -> None:
    minute = BASE_MS
    paths = [_write(tmp_path / "a.parquet", [("u1", 5, minute + 10), ("u2", 7, minute + 59_999),
                                             ("u1", 1, minute - 1)]),
             _write(tmp_path / "b.parquet", [("u1", 3, minute + 20), ("u2", 2, minute + 60_000)])]
    got = reference(paths)
    assert got.to_dict("records") == [
        {"user": 1, "window_start": minute - WINDOW_MS, "n": 1, "total": 1},
        {"user": 1, "window_start": minute, "n": 2, "total": 8},
        {"user": 2, "window_start": minute, "n": 1, "total": 7},
        {"user": 2, "window_start": minute + WINDOW_MS, "n": 1, "total": 2}]


def _output(rows: Sequence[tuple[int, int, int, float]], *, end_offset: int = WINDOW_MS
            ) -> pd.DataFrame:
    return pd.DataFrame([{"user": u, "window_start": w, "window_end": w + end_offset, "n": n,
                          "total": t, "fired_at": 0, "visible_at": 0.0}
                         for u, w, n, t in rows])


EXPECTED = pd.DataFrame({"user": [1, 1, 2], "window_start": [BASE_MS, BASE_MS + WINDOW_MS,
                                                            BASE_MS],
                         "n": [2, 1, 4], "total": [8, 3, 10]})
RIGHT = [(1, BASE_MS, 2, 8), (1, BASE_MS + WINDOW_MS, 1, 3), (2, BASE_MS, 4, 10)]


def test_an_output_equal_to_the_reference_passes_in_any_order_and_with_float_sums() -> None:
    assert check_windows(EXPECTED, _output(list(reversed(RIGHT)))) == []
    floats = _output(RIGHT)
    floats["total"] = floats["total"].astype(np.float64)
    assert check_windows(EXPECTED, floats) == []


@pytest.mark.parametrize(("rows", "problem"), [
    ([*RIGHT, RIGHT[0]], "1 windows emitted more than once"),
    (RIGHT[:2], "1 of 3 windows missing (u2 at"),
    ([*RIGHT, (3, BASE_MS, 1, 1)], "1 windows that the input has no record of"),
    ([RIGHT[0], RIGHT[1], (2, BASE_MS, 4, 11)], "1 windows with a wrong count or sum (u2"),
    ([RIGHT[0], RIGHT[1], (2, BASE_MS, 3, 10)], "1 windows with a wrong count or sum"),
    ([*RIGHT, (UNKNOWN_USER, BASE_MS, 1, 0)], "1 rows of a user that is not in the input"),
])
def test_a_repeated_missing_extra_or_wrong_window_is_refused(
        rows: list[tuple[int, int, int, float]], problem: str) -> None:
    problems = check_windows(EXPECTED, _output(rows))
    assert any(p.startswith(problem) for p in problems), problems


def test_a_wrong_window_end_is_refused() -> None:
    problems = check_windows(EXPECTED, _output(RIGHT, end_offset=WINDOW_MS - 1))
    assert problems and problems[0].startswith("3 rows whose window_end")


def test_a_windows_latency_runs_from_its_first_row_fired_to_its_last_row_visible() -> None:
    rows = pd.DataFrame({
        "window_start": [0, 0, WINDOW_MS, 2 * WINDOW_MS, 3 * WINDOW_MS],
        "fired_at": [1000, 1200, 5000, 6000, 9000],
        "visible_at": [1.5, 2.5, 5.25, np.nan, 9.5]})
    lat = window_latencies(rows, cut_ms=3 * WINDOW_MS)
    # Window 0: first fired at 1.0 s, last row visible at 2.5 s. Window 2 has a row
    # never seen appearing; window 3 ends after the cut (the end of input fired it).
    assert lat.seconds == (1.5, 0.25)
    assert (lat.windows, lat.after_cut, lat.unseen) == (4, 1, 1)


def test_the_measured_windows_end_a_window_and_two_files_before_the_streams_watermark() -> None:
    spec = DataSpec(records=1_000_000, keys=10, file_records=25_000)
    assert measured_cut(spec, max_ts=BASE_MS + 1_000_000, watermark_delay_ms=5000) == \
        BASE_MS + 1_000_000 - 5000 - WINDOW_MS - 50_000


def _spark_log(folder: Path, name: str, entries: list[tuple[str, str]]) -> None:
    lines = ["v1"] + [json.dumps({"path": uri, "size": 1, "isDir": False,
                                  "modificationTime": 0, "blockReplication": 1,
                                  "blockSize": 1, "action": action})
                      for uri, action in entries]
    (folder / name).write_text("\n".join(lines))


def test_structured_streamings_committed_files_are_the_ones_its_sink_log_adds(
        tmp_path: Path) -> None:
    log = tmp_path / "_spark_metadata"
    log.mkdir()
    a, b, c = (tmp_path / f"part-{n}.parquet" for n in "abc")
    _spark_log(log, "0", [(a.as_uri(), "add")])
    _spark_log(log, "1", [(b.as_uri(), "add")])
    _spark_log(log, "2.compact", [(a.as_uri(), "add"), (b.as_uri(), "add"),
                                  (c.as_uri(), "add")])
    _spark_log(log, "3", [(b.as_uri(), "delete")])
    (log / ".3.crc").write_text("x")
    (tmp_path / "part-uncommitted.parquet").write_text("")
    assert spark_committed(tmp_path) == [a, c]
    assert spark_log_entries("v1\n" + json.dumps({"path": "file:///x%20y"})) == [
        ("file:///x%20y", "add")]
    with pytest.raises(ValueError, match="not a file sink log"):
        spark_log_entries("")


def test_the_watcher_times_files_when_they_become_visible(tmp_path: Path) -> None:
    ours = tmp_path / "ours"
    (ours / "_pending").mkdir(parents=True)
    watcher = OutputWatcher(ours, kind="ours")
    (ours / "_pending" / "part-x.parquet").write_text("")
    watcher.poll(1.0)
    (ours / "part-t-0000000001-00000.parquet").write_text("")
    watcher.poll(2.0)
    watcher.poll(3.0)
    assert watcher.seen == {ours / "part-t-0000000001-00000.parquet": 2.0}
    assert ours_committed(ours) == [ours / "part-t-0000000001-00000.parquet"]
    spark = tmp_path / "spark"
    watcher = OutputWatcher(spark, kind="spark")
    watcher.poll(1.0)  # no log yet
    (spark / "_spark_metadata").mkdir(parents=True)
    data = spark / "part-0.parquet"
    data.write_text("")
    watcher.poll(2.0)  # written, not committed
    _spark_log(spark / "_spark_metadata", "0", [(data.as_uri(), "add")])
    watcher.poll(3.0)
    assert watcher.seen == {data: 3.0}


def test_structured_streamings_input_holds_the_same_files_and_ends_with_the_end_record(
        tmp_path: Path) -> None:
    generated = generate(tmp_path / "in", SPEC)
    assert [p.name for p in generated.paths] == [f"part-{i:06d}.parquet" for i in range(5)]
    mtimes = [p.stat().st_mtime for p in generated.paths]
    assert mtimes == sorted(mtimes) and len(set(mtimes)) == len(mtimes)
    folder = link_input(tmp_path / "ss", generated)
    names = sorted(os.listdir(folder), key=lambda n: (folder / n).stat().st_mtime)
    assert names == [*(p.name for p in generated.paths), "zz-end.parquet"]
    assert os.path.samefile(folder / names[0], generated.paths[0])
    end = pq.read_table(folder / "zz-end.parquet").to_pylist()
    assert end[0]["user"] == END_USER and end[0]["ts"] > generated.max_ts + WINDOW_MS
    expected = reference(generated.paths)
    assert expected["n"].sum() == SPEC.records
    output = read_output([])
    assert check_windows(expected, output)[0].startswith(f"{len(expected):,} of")


def _batch(batch_id: int, rows: int, ms: float) -> Batch:
    return Batch(batch_id=batch_id, rows=rows, started_at=float(batch_id), duration_ms=ms,
                 watermark_ms=None)


def test_the_steady_rate_counts_batches_after_the_warm_up_up_to_the_last_full_one() -> None:
    run = QueryRun(max_files=4, file_records=1000, spark_ready_at=0.0, launched_at=0.0,
                   batches=(_batch(0, 4000, 900), _batch(1, 4000, 800), _batch(2, 4000, 500),
                            _batch(3, 0, 100), _batch(4, 4000, 500), _batch(5, 1001, 300),
                            _batch(6, 0, 700)))
    # Two warm-up batches out; batch 5 (the remainder and the end record) and 6 (the
    # last windows) out; the empty batch 3 in between counts its time.
    assert steady(run) == (8000, 1.1)
    assert parse(dump(run)) == run


def test_a_batch_size_is_a_number_of_whole_files() -> None:
    assert files_for(500_000, 25_000) == 20
    assert files_for(10_000, 25_000) == 1
    assert files_for(62_500, 25_000) == 2


def _ns(*args: str) -> argparse.Namespace:
    return build_parser().parse_args(["windows", *args])


def test_windows_is_a_benchmark_with_a_quick_scale_and_refuses_late_records(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BENCH_WINDOWS_RECORDS", "BENCH_KEYS", "BENCH_REPEAT"):
        monkeypatch.delenv(name, raising=False)
    assert BENCHMARKS["windows"] == "bench.windows"
    scale = resolve_scale(_ns())
    assert (scale.spec.records, scale.spec.keys, scale.repeat) == (10_000_000, 100_000, 3)
    quick = resolve_scale(_ns("--quick"))
    assert (quick.spec.records, quick.spec.keys, quick.repeat) == (2_000_000, 10_000, 1)
    with pytest.raises(BenchmarkError, match="must exceed the disorder"):
        resolve_scale(_ns("--disorder", "5", "--watermark-delay", "5"))
