"""The realistic benchmark's data, reference and checks, without either engine.

What the input promises (the same for a seed, the same records in JSON lines as in
Parquet, skewed string users), that the reference counts, sums and averages per user,
that the in-process limit computes the same on one thread, and what the output check
refuses (a key missing or extra, a wrong count, sum or mean).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.common import BenchmarkError
from bench.realistic import QUICK, add_arguments, resolve_scale
from bench.realistic_data import (
    BASE_MS,
    FLOAT_SCHEMA,
    FORMATS,
    SCHEMA,
    Dataset,
    DataSpec,
    check_totals,
    dataset_spec,
    file_table,
    final_rows,
    generate,
    in_process_limit,
    read_file,
    read_output,
    reference,
    spark_output,
    user_names,
    write_file,
)

SPEC = DataSpec(records=25_000, keys=2_000, file_records=5_000)


def test_generation_is_the_same_for_a_seed_and_differs_for_another() -> None:
    first, again = file_table(SPEC, 1), file_table(SPEC, 1)
    assert first.equals(again)
    assert first.schema == SCHEMA and first.num_rows == 5_000
    other = file_table(DataSpec(records=25_000, keys=2_000, file_records=5_000, seed=12), 1)
    assert not other["user"].equals(first["user"])
    assert not file_table(SPEC, 2)["user"].equals(first["user"])


def test_records_are_skewed_distinct_string_users_with_increasing_time() -> None:
    names = user_names(SPEC.keys, SPEC.seed).to_pylist()
    assert len(set(names)) == SPEC.keys
    assert all(re.fullmatch(r"u-[0-9a-f]{10}", name) for name in names)
    whole = pa.concat_tables([file_table(SPEC, i) for i in range(SPEC.files)])
    assert whole.num_rows == SPEC.records
    assert whole["ts"].to_pylist() == list(range(BASE_MS, BASE_MS + SPEC.records))
    amounts = whole["amount"].to_numpy()
    assert amounts.min() >= 1 and amounts.max() <= 1000
    counts = pd.Series(whole["user"].to_pylist()).value_counts()
    assert counts.index[0] == names[0]  # rank 0 is the most popular user
    assert counts.iloc[0] > 20 * counts.median()
    # Popularity does not follow the order of the ids.
    assert counts.index[0] != min(names)


def test_json_lines_and_parquet_hold_the_same_records(tmp_path: Path) -> None:
    generated = generate(tmp_path, SPEC, FORMATS)
    assert [p.name for p in generated.paths["jsonl"]] == [
        f"part-{i:06d}.jsonl" for i in range(SPEC.files)]
    assert all(generated.bytes[fmt] > 0 for fmt in FORMATS)
    for parquet, jsonl in zip(generated.paths["parquet"], generated.paths["jsonl"],
                              strict=True):
        columns = list(SCHEMA.names)
        assert read_file(parquet, "parquet", columns=columns).equals(
            read_file(jsonl, "jsonl", columns=columns))
    mtimes = [p.stat().st_mtime for p in generated.paths["parquet"]]
    assert mtimes == sorted(mtimes) and len(set(mtimes)) == len(mtimes)


def _write(path: Path, rows: list[tuple[str, int]], fmt: str = "parquet") -> Path:
    users, amounts = zip(*rows, strict=True)
    count = len(rows)
    table = pa.table([pa.array(users), pa.array(amounts, pa.int64()),
                      pa.array(range(count), pa.int64()), pa.array(["p"] * count)],
                     schema=SCHEMA)
    write_file(table, path, fmt)
    return path


def _files(tmp_path: Path, fmt: str) -> list[Path]:
    return [_write(tmp_path / f"a.{fmt}", [("u-a", 5), ("u-b", 7), ("u-a", 1)], fmt),
            _write(tmp_path / f"b.{fmt}", [("u-a", 3), ("u-c", 2)], fmt)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_reference_counts_sums_and_averages_per_user_across_files(
        tmp_path: Path, fmt: str) -> None:
    got = reference(_files(tmp_path, fmt), fmt).sort_by("user").to_pylist()
    assert got == [{"user": "u-a", "n": 3, "total": 9, "avg": 3.0},
                   {"user": "u-b", "n": 1, "total": 7, "avg": 7.0},
                   {"user": "u-c", "n": 1, "total": 2, "avg": 2.0}]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_in_process_limit_computes_the_reference_on_one_thread(
        tmp_path: Path, fmt: str) -> None:
    threads = pa.cpu_count()
    limit, totals = in_process_limit(_files(tmp_path, fmt), fmt)
    assert pa.cpu_count() == threads  # restored after the measurement
    assert limit.records == 5 and limit.keys == 3 and limit.records_per_second > 0
    assert check_totals(reference(_files(tmp_path, fmt), fmt), totals) == []


def _updates(rows: list[tuple[str, int, float, float]]) -> pa.Table:
    users, n, total, avg = zip(*rows, strict=True)
    return pa.table({"user": pa.array(users), "n": pa.array(n, pa.int64()),
                     "total": pa.array(total, pa.int64()),
                     "avg": pa.array(avg, pa.float64())})


EXPECTED = _updates([("u-a", 3, 9, 3.0), ("u-b", 1, 7, 7.0), ("u-c", 1, 2, 2.0)])


def test_the_check_takes_each_users_row_of_the_largest_count_in_any_order() -> None:
    output = _updates([("u-a", 3, 9, 3.0), ("u-b", 1, 7, 7.0), ("u-a", 2, 6, 3.0),
                       ("u-c", 1, 2, 2.0), ("u-a", 3, 9, 3.0), ("u-a", 1, 5, 5.0)])
    assert check_totals(EXPECTED, output) == []
    final, problems = final_rows(output)
    assert problems == []
    assert final.sort_by("user")["n"].to_pylist() == [3, 1, 1]


def test_the_check_catches_a_wrong_count() -> None:
    output = _updates([("u-a", 4, 9, 2.25), ("u-b", 1, 7, 7.0), ("u-c", 1, 2, 2.0)])
    (problem,) = check_totals(EXPECTED, output)
    assert "1 users with a wrong count, sum or mean (u-a: 4 records" in problem


def test_the_check_catches_a_wrong_sum_or_mean() -> None:
    assert check_totals(EXPECTED, _updates([("u-a", 3, 10, 3.0), ("u-b", 1, 7, 7.0),
                                            ("u-c", 1, 2, 2.0)]))
    assert check_totals(EXPECTED, _updates([("u-a", 3, 9, 3.0001), ("u-b", 1, 7, 7.0),
                                            ("u-c", 1, 2, 2.0)]))
    assert check_totals(EXPECTED, _updates([("u-a", 3, 9, float("nan")), ("u-b", 1, 7, 7.0),
                                            ("u-c", 1, 2, 2.0)]))
    assert check_totals(EXPECTED, _updates([("u-a", 3, 9, 3.0 * (1 + 1e-12)),
                                            ("u-b", 1, 7, 7.0), ("u-c", 1, 2, 2.0)])) == []


def test_the_check_catches_a_missing_and_an_extra_key() -> None:
    problems = check_totals(EXPECTED, _updates([("u-a", 3, 9, 3.0), ("u-c", 1, 2, 2.0),
                                                ("u-z", 1, 1, 1.0)]))
    assert problems == ["1 of 3 users missing (u-b)",
                        "1 users that the input has no record of (u-z)"]


def test_the_check_catches_rows_of_one_count_that_disagree() -> None:
    problems = check_totals(EXPECTED, _updates([("u-a", 3, 9, 3.0), ("u-a", 3, 8, 3.0),
                                                ("u-b", 1, 7, 7.0), ("u-c", 1, 2, 2.0)]))
    assert any("same count and different totals" in p for p in problems)


def test_structured_streamings_output_is_every_batch_folders_parquet_files(
        tmp_path: Path) -> None:
    for batch, rows in ((0, [("u-a", 2, 6, 3.0), ("u-b", 1, 7, 7.0)]),
                        (1, [("u-a", 3, 9, 3.0), ("u-c", 1, 2, 2.0)])):
        folder = tmp_path / f"batch={batch}"
        folder.mkdir()
        pq.write_table(_updates(rows), folder / "part-00000-x-c000.snappy.parquet")
        (folder / "_SUCCESS").touch()
    (tmp_path / "batch=1" / "_temporary").mkdir()
    files = spark_output(tmp_path)
    assert [p.parent.name for p in files] == ["batch=0", "batch=1"]
    assert check_totals(EXPECTED, read_output(files)) == []


def _parse(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(args))


def test_quick_scale_and_refused_options() -> None:
    scale = resolve_scale(_parse("--quick"))
    assert (scale.spec.records, scale.spec.keys, scale.spec.file_records) == QUICK
    assert scale.repeat == 1 and scale.formats == FORMATS and scale.max_files is None
    assert resolve_scale(_parse("--formats", "jsonl", "--records", "80000",
                                "--file-records", "10000")).formats == ("jsonl",)
    with pytest.raises(BenchmarkError, match="--formats"):
        resolve_scale(_parse("--formats", "csv"))
    with pytest.raises(BenchmarkError, match="at least 8 files"):
        resolve_scale(_parse("--records", "1000", "--file-records", "500"))
    with pytest.raises(BenchmarkError, match="--dataset takes one of clicks, orders"):
        resolve_scale(_parse("--dataset", "sales"))


def test_each_dataset_has_its_shape_and_its_own_result_names() -> None:
    clicks = resolve_scale(_parse("--records", "4000000"))
    orders = resolve_scale(_parse("--dataset", "orders", "--records", "40000000"))
    assert (clicks.spec.skew, clicks.spec.file_records, clicks.spec.float_amounts) == \
        (1.1, 200_000, False)
    assert (orders.spec.skew, orders.spec.file_records, orders.spec.row_group_rows,
            orders.spec.float_amounts) == (1.4, 1_000_000, 1_000_000, True)
    assert (clicks.result_name, orders.result_name) == ("realistic", "realistic-orders")
    assert orders.summary_prefix == "realistic_orders"
    assert "amount DOUBLE" in orders.spec.spark_schema
    assert "amount LONG" in clicks.spec.spark_schema


ORDERS = dataset_spec(Dataset.ORDERS, records=40_000, keys=2_000, file_records=10_000)


def test_orders_hold_cent_prices_more_skewed_users_and_one_row_group_per_file(
        tmp_path: Path) -> None:
    table = file_table(ORDERS, 0)
    assert table.schema == FLOAT_SCHEMA
    amounts = table["amount"].to_numpy()
    assert (amounts > 0).all() and (abs(amounts * 100 - (amounts * 100).round()) < 1e-6).all()
    assert len(set(amounts.tolist())) > 1_000
    top = pd.Series(table["user"].to_pylist()).value_counts().iloc[0] / table.num_rows
    clicks_top = (pd.Series(file_table(DataSpec(records=40_000, keys=2_000,
                                                file_records=10_000), 0)["user"].to_pylist())
                  .value_counts().iloc[0] / table.num_rows)
    assert top > 1.5 * clicks_top
    generated = generate(tmp_path, ORDERS, FORMATS)
    assert pq.ParquetFile(generated.paths["parquet"][0]).metadata.num_row_groups == 1
    columns = list(FLOAT_SCHEMA.names)
    for parquet, jsonl in zip(generated.paths["parquet"], generated.paths["jsonl"],
                              strict=True):
        assert read_file(parquet, "parquet", columns=columns, schema=FLOAT_SCHEMA).equals(
            read_file(jsonl, "jsonl", columns=columns, schema=FLOAT_SCHEMA))
    expected = reference(generated.paths["jsonl"], "jsonl", schema=FLOAT_SCHEMA)
    _, totals = in_process_limit(generated.paths["parquet"], "parquet", schema=FLOAT_SCHEMA)
    assert check_totals(expected, totals, total_tolerance=ORDERS.total_tolerance) == []


def test_float_sums_are_checked_within_a_relative_tolerance() -> None:
    expected = pa.table({"user": ["u-a"], "n": pa.array([3], pa.int64()),
                         "total": pa.array([0.3], pa.float64()),
                         "avg": pa.array([0.1], pa.float64())})

    def output(total: float) -> pa.Table:
        return pa.table({"user": ["u-a"], "n": pa.array([3], pa.int64()),
                         "total": pa.array([total], pa.float64()),
                         "avg": pa.array([total / 3], pa.float64())})

    summed_in_another_order = 0.1 + 0.2 + 0.0  # 0.30000000000000004
    assert check_totals(expected, output(summed_in_another_order)) != []
    assert check_totals(expected, output(summed_in_another_order),
                        total_tolerance=1e-9) == []
    assert check_totals(expected, output(0.31), total_tolerance=1e-9) != []
