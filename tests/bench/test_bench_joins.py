"""The joins benchmark's pairs: the numpy reference finds exactly the pairs a nested
loop over the input finds, our job's views and buys join into those pairs, and the
check refuses a missing, an extra or a repeated pair."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.__main__ import BENCHMARKS, build_parser
from bench.joins import check_pairs, read_pairs, reference
from bench.joins_job import OUTPUT_COLUMNS, UPPER_MS, buys, views
from bench.windows_data import BASE_MS, SCHEMA


def write_input(folder: Path, rows: list[tuple[str, int, int]], *, files: int = 3) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    size = -(-len(rows) // files)
    for part in range(files):
        chunk = rows[part * size:(part + 1) * size]
        path = folder / f"part-{part:06d}.parquet"
        pq.write_table(pa.table([pa.array([r[0] for r in chunk]),
                                 pa.array([r[1] for r in chunk], type=pa.int64()),
                                 pa.array([r[2] for r in chunk], type=pa.int64())],
                                schema=SCHEMA), path)
        paths.append(path)
    return paths


def random_rows(count: int, *, seed: int = 1) -> list[tuple[str, int, int]]:
    rng = random.Random(seed)
    return [(f"u{rng.randrange(7)}", rng.randrange(1, 1001), BASE_MS + rng.randrange(20_000))
            for _ in range(count)]


def nested_loop(rows: list[tuple[str, int, int]]) -> list[tuple[int, ...]]:
    return sorted((int(v[0][1:]), v[2], v[1], b[2], b[1]) for v in rows for b in rows
                  if v[1] % 2 == 0 and b[1] % 2 == 1 and v[0] == b[0]
                  and v[2] <= b[2] <= v[2] + UPPER_MS)


def test_the_reference_is_every_pair_a_nested_loop_finds(tmp_path: Path) -> None:
    rows = random_rows(2_000)
    expected = nested_loop(rows)
    found = reference(write_input(tmp_path, rows))
    assert [tuple(r) for r in found.tolist()] == expected and len(expected) > 500


def test_the_jobs_sides_join_into_the_reference_pairs(tmp_path: Path) -> None:
    rows = random_rows(600, seed=2)
    table = pa.table([pa.array([r[0] for r in rows]), pa.array([r[1] for r in rows]),
                      pa.array([r[2] for r in rows])], schema=SCHEMA)
    seen = pa.Table.from_batches([views(b) for b in table.to_batches()])
    bought = pa.Table.from_batches([buys(b) for b in table.to_batches()])
    assert seen.num_rows + bought.num_rows == len(rows)
    joined = seen.join(bought, keys="user", right_suffix="_b", join_type="inner")
    kept = joined.filter(pa.compute.and_(
        pa.compute.greater_equal(joined["buy_ts"], joined["ts"]),
        pa.compute.less_equal(joined["buy_ts"], pa.compute.add(joined["ts"], UPPER_MS))))
    out = tmp_path / "out.parquet"
    pq.write_table(kept.select(list(OUTPUT_COLUMNS)), out)
    pairs, ends = read_pairs([out])
    assert ends == 0
    assert check_pairs(reference(write_input(tmp_path / "in", rows)), pairs) == []


def test_the_check_names_missing_extra_and_repeated_pairs() -> None:
    expected = np.array([[1, 10, 2, 11, 3], [1, 10, 2, 12, 5]], dtype=np.int64)
    assert check_pairs(expected, expected) == []
    assert check_pairs(expected, expected[:1]) == ["1 of 2 pairs missing"]
    twice = np.array([[1, 10, 2, 11, 3], [1, 10, 2, 11, 3], [1, 10, 2, 12, 5]])
    assert check_pairs(expected, twice) == ["1 pairs emitted more than once"]
    other = np.array([[1, 10, 2, 11, 3], [2, 10, 2, 12, 5]], dtype=np.int64)
    assert check_pairs(expected, other) == ["1 of 2 pairs missing",
                                            "1 pairs the input does not have"]


def test_joins_is_a_benchmark_of_the_command_line() -> None:
    assert BENCHMARKS["joins"] == "bench.joins"
    ns = build_parser().parse_args(["joins", "--quick"])
    assert ns.benchmark == "joins"
