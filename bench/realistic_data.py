"""The realistic benchmark's data, its reference result, how an output is checked, and the
in-process limit.

Input: ``records`` records in files of ``file_records`` records, the same records in
each requested format: Parquet (``part-<n>.parquet``, written with pyarrow in row
groups of :data:`ROW_GROUP_ROWS` rows) and JSON lines (``part-<n>.jsonl``, one object
per line, written with pandas). Columns:

* ``user``: a string such as ``"u-3f9a1c27d1"`` (the hex of a random 40-bit id, one
  distinct id per key), drawn from ``keys`` users by a truncated Zipf law of exponent
  ``skew`` (rank ``r`` with weight ``1 / (r + 1) ** skew``); ranks are mapped to users
  through a fixed random permutation, so the popular users are not the first ids;
* ``amount``: int64, uniform in 1..1000; or, with ``float_amounts``, a price in cents
  as a float64 (log-normal, median about 20.00), whose sums depend on the order of
  addition and are checked within :data:`TOTAL_TOLERANCE`;
* ``ts``: int64 epoch milliseconds, 1 ms per record: increasing through the input;
* ``page``: a string from :data:`PAGES` values (read by neither side's query: it
  makes the rows wider, as real events are).

Every file is drawn from its own seed (``seed``, file index), so the input is the same
on every run; user names and weights are built once per input (no Python code per
record).

Output rows, ours and Structured Streaming's alike: ``user``, ``n`` (count), ``total``
(sum of ``amount``) and ``avg`` (mean of ``amount``), a row per key each time an update
of it is emitted. The count of a key only grows, so its final value is its row with
the largest ``n``.

The functions here touch only local files, so they are tested without either engine.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from bench.windows_data import ours_committed

BASE_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z: ``ts`` of record 0."""
FORMATS = ("parquet", "jsonl")
SPARK_FORMATS = {"parquet": "parquet", "jsonl": "json"}
"""Structured Streaming's name of each format."""
PAGES = 50
ROW_GROUP_ROWS = 65_536
SCHEMA = pa.schema([("user", pa.string()), ("amount", pa.int64()), ("ts", pa.int64()),
                    ("page", pa.string())])
FLOAT_SCHEMA = SCHEMA.set(1, pa.field("amount", pa.float64()))
OUTPUT_COLUMNS = ("user", "n", "total", "avg")
MEAN_TOLERANCE = 1e-9
"""Relative: a mean may differ from the reference's by the order of summation."""
TOTAL_TOLERANCE = 1e-9
"""Relative, for sums of float amounts (integer sums are checked exactly)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataSpec:
    records: int
    keys: int
    file_records: int
    skew: float = 1.1
    seed: int = 11
    row_group_rows: int = ROW_GROUP_ROWS
    float_amounts: bool = False

    def __post_init__(self) -> None:
        if min(self.records, self.keys, self.file_records, self.row_group_rows) < 1 \
                or self.skew <= 0:
            raise ValueError("records, keys, file_records and row_group_rows must be "
                             "positive, and the skew above 0")

    @property
    def files(self) -> int:
        return -(-self.records // self.file_records)

    @property
    def schema(self) -> pa.Schema:
        return FLOAT_SCHEMA if self.float_amounts else SCHEMA

    @property
    def spark_schema(self) -> str:
        return spark_schema(float_amounts=self.float_amounts)

    @property
    def total_tolerance(self) -> float:
        return TOTAL_TOLERANCE if self.float_amounts else 0.0


def spark_schema(*, float_amounts: bool) -> str:
    """The input's schema as Structured Streaming is given it."""
    amount = "DOUBLE" if float_amounts else "LONG"
    return f"user STRING, amount {amount}, ts LONG, page STRING"


class Dataset(enum.StrEnum):
    """The realistic benchmark's two shapes of input."""

    CLICKS = "clicks"
    """1M users at Zipf 1.1, integer amounts, files of 200k records, row groups of 64k."""
    ORDERS = "orders"
    """Heavier skew (Zipf 1.4), float amounts, files of 1M records in one row group."""


def dataset_spec(dataset: Dataset, *, records: int, keys: int | None = None,
                 file_records: int | None = None) -> DataSpec:
    """``dataset``'s shape at ``records`` records (``keys`` and ``file_records``, when
    given, instead of the dataset's)."""
    if dataset is Dataset.CLICKS:
        return DataSpec(records=records, keys=keys or 1_000_000,
                        file_records=file_records or 200_000)
    files = file_records or 1_000_000
    return DataSpec(records=records, keys=keys or 1_000_000, file_records=files, skew=1.4,
                    row_group_rows=files, float_amounts=True)


def file_name(index: int, fmt: str) -> str:
    return f"part-{index:06d}.{fmt}"


# ---------------------------------------------------------------------- generation


@functools.lru_cache(maxsize=4)
def user_names(keys: int, seed: int) -> pa.Array:
    """Users by popularity rank: ``"u-<10 hex digits>"``, distinct; rank ``r``'s user is
    the permutation's ``r``-th of the ids, drawn at random."""
    rng = np.random.default_rng([seed, 0xC0FFEE])
    ids = np.empty(0, dtype=np.int64)
    while len(ids) < keys:
        drawn = np.concatenate([ids, rng.integers(0, 2**40, size=2 * keys, dtype=np.int64)])
        _, first = np.unique(drawn, return_index=True)
        ids = drawn[np.sort(first)][:keys]  # distinct, in the order drawn
    names = pa.array([f"u-{int(v):010x}" for v in ids], type=pa.string())
    return names.take(pa.array(rng.permutation(keys)))


@functools.lru_cache(maxsize=4)
def _zipf_cdf(keys: int, skew: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, keys + 1, dtype=np.float64) ** skew
    cdf: np.ndarray = np.cumsum(weights)
    normalised: np.ndarray = cdf / cdf[-1]
    return normalised


@functools.lru_cache(maxsize=1)
def _page_names() -> pa.Array:
    return pa.array([f"page-{i:02d}" for i in range(PAGES)], type=pa.string())


def file_table(spec: DataSpec, index: int) -> pa.Table:
    """File ``index`` of the input: records ``index * file_records`` onwards."""
    start = index * spec.file_records
    stop = min(spec.records, start + spec.file_records)
    if not 0 <= start < stop:
        raise IndexError(f"file {index} of {spec.files}")
    count = stop - start
    rng = np.random.default_rng([spec.seed, index])
    ranks = np.searchsorted(_zipf_cdf(spec.keys, spec.skew), rng.random(count), side="right")
    ranks = np.minimum(ranks, spec.keys - 1)
    amount = (np.round(rng.lognormal(3.0, 1.0, size=count), 2) if spec.float_amounts
              else rng.integers(1, 1001, size=count, dtype=np.int64))
    pages = rng.integers(0, PAGES, size=count)
    ts = BASE_MS + np.arange(start, stop, dtype=np.int64)
    return pa.table([user_names(spec.keys, spec.seed).take(pa.array(ranks)), pa.array(amount),
                     pa.array(ts), _page_names().take(pa.array(pages))], schema=spec.schema)


def write_file(table: pa.Table, path: Path, fmt: str, *,
               row_group_rows: int = ROW_GROUP_ROWS) -> None:
    if fmt == "parquet":
        pq.write_table(table, path, row_group_size=row_group_rows)
    elif fmt == "jsonl":
        table.to_pandas().to_json(path, orient="records", lines=True)
    else:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Generated:
    paths: dict[str, tuple[Path, ...]]
    """Per format, its files in order."""
    bytes: dict[str, int]
    seconds: float

    def directory(self, fmt: str) -> Path:
        return self.paths[fmt][0].parent


def generate(directory: Path, spec: DataSpec, formats: Sequence[str]) -> Generated:
    """Write the input into ``directory/<format>/``, one file at a time, each file in
    every format from the same table.

    Each file's modification time is one second after the previous one's: Structured
    Streaming's file source takes new files in modification-time order.
    """
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"formats must be some of {', '.join(FORMATS)}, got "
                         f"{', '.join(formats) or 'none'}")
    started = time.monotonic()
    for fmt in formats:
        (directory / fmt).mkdir(parents=True, exist_ok=True)
    first_mtime = int(time.time()) - spec.files - 60
    paths: dict[str, list[Path]] = {fmt: [] for fmt in formats}
    size = dict.fromkeys(formats, 0)
    for index in range(spec.files):
        table = file_table(spec, index)
        mtime = first_mtime + index
        for fmt in formats:
            path = directory / fmt / file_name(index, fmt)
            write_file(table, path, fmt, row_group_rows=spec.row_group_rows)
            os.utime(path, (mtime, mtime))
            size[fmt] += path.stat().st_size
            paths[fmt].append(path)
    return Generated(paths={f: tuple(p) for f, p in paths.items()}, bytes=size,
                     seconds=time.monotonic() - started)


def link_input(directory: Path, paths: Sequence[Path]) -> Path:
    """Structured Streaming's input folder: hard links to the same files."""
    directory.mkdir(parents=True)
    for path in paths:
        os.link(path, directory / path.name)
    return directory


def read_file(path: Path, fmt: str, *, columns: Sequence[str] = ("user", "amount"),
              use_threads: bool = True, schema: pa.Schema = SCHEMA) -> pa.Table:
    """One input file's ``columns`` with Arrow."""
    if fmt == "parquet":
        return pq.read_table(path, columns=list(columns), use_threads=use_threads)
    if fmt == "jsonl":
        # As a competent Arrow user reads it: the read fields' types given, the others
        # skipped (Spark's JSON reader is handed the columns its query reads, too).
        read = pa.schema([schema.field(name) for name in columns])
        return pajson.read_json(path, read_options=pajson.ReadOptions(use_threads=use_threads),
                                parse_options=pajson.ParseOptions(
                                    explicit_schema=read, unexpected_field_behavior="ignore"))
    raise ValueError(f"unknown format {fmt!r}")


# ---------------------------------------------------------------------- reference


def aggregate_files(paths: Iterable[Path], fmt: str, *, use_threads: bool = True,
                    schema: pa.Schema = SCHEMA) -> pa.Table:
    """``user, n, total, avg`` over the files: each file read and grouped by ``user``
    with Arrow, then the per-file partials merged by one more group-by."""
    partials = []
    for path in paths:
        table = read_file(path, fmt, use_threads=use_threads, schema=schema)
        partials.append(table.group_by("user", use_threads=use_threads).aggregate(
            [("amount", "sum"), ("amount", "count")]))
    if not partials:
        return pa.table({"user": pa.array([], pa.string()), "n": pa.array([], pa.int64()),
                         "total": pa.array([], pa.int64()), "avg": pa.array([], pa.float64())})
    merged = pa.concat_tables(partials).group_by("user", use_threads=use_threads).aggregate(
        [("amount_sum", "sum"), ("amount_count", "sum")])
    n = merged["amount_count_sum"]
    total = merged["amount_sum_sum"]
    return pa.table({"user": merged["user"], "n": n, "total": total,
                     "avg": pc.divide(pc.cast(total, pa.float64()), pc.cast(n, pa.float64()))})


def reference(paths: Iterable[Path], fmt: str, *, schema: pa.Schema = SCHEMA) -> pa.Table:
    """Count, sum and mean of ``amount`` per user over all the files: the distinct users
    present, one row each."""
    return aggregate_files(paths, fmt, schema=schema)


# ---------------------------------------------------------------------- in-process limit


@dataclasses.dataclass(frozen=True, kw_only=True)
class Limit:
    records: int
    seconds: float
    keys: int

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("nan")


def in_process_limit(paths: Sequence[Path], fmt: str, *,
                     schema: pa.Schema = SCHEMA) -> tuple[Limit, pa.Table]:
    """The whole computation in this process on one core: every file read with Arrow
    and grouped by ``user``, the partials merged (reading included; no exchange, no
    state store, no checkpoint, no output). Arrow's thread pools are held to one
    thread for the measurement. The rate and the totals (for a check)."""
    cpus, io_threads = pa.cpu_count(), pa.io_thread_count()
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    try:
        started = time.perf_counter()
        totals = aggregate_files(paths, fmt, use_threads=False, schema=schema)
        seconds = time.perf_counter() - started
    finally:
        pa.set_cpu_count(cpus)
        pa.set_io_thread_count(io_threads)
    records = int(pc.sum(totals["n"]).as_py() or 0)
    return Limit(records=records, seconds=seconds, keys=totals.num_rows), totals


# ---------------------------------------------------------------------- outputs


def _normalised(table: pa.Table) -> pa.Table:
    missing = [c for c in OUTPUT_COLUMNS if c not in table.schema.names]
    if missing:
        raise ValueError(f"no column {', '.join(missing)} in the output (it has "
                         f"{', '.join(table.schema.names)})")
    return pa.table({"user": pc.cast(table["user"], pa.string()),
                     "n": pc.cast(table["n"], pa.int64()),
                     "total": pc.cast(table["total"], pa.float64()),
                     "avg": pc.cast(table["avg"], pa.float64())})


def read_output(paths: Iterable[Path]) -> pa.Table:
    """The rows of the output files ``paths``, as ``user, n, total, avg`` (``total`` as a
    float: integers up to 2**53 are exact, and a fractional sum shows as wrong)."""
    tables = [_normalised(pq.read_table(path)) for path in paths]
    if not tables:
        return _normalised(pa.table({"user": pa.array([], pa.string()),
                                     "n": pa.array([], pa.int64()),
                                     "total": pa.array([], pa.float64()),
                                     "avg": pa.array([], pa.float64())}))
    return pa.concat_tables(tables)


def ours_output(output: Path) -> list[Path]:
    """Our files sink's committed files."""
    return ours_committed(output)


def spark_output(output: Path) -> list[Path]:
    """The files of every batch Structured Streaming's ``foreachBatch`` wrote: each batch
    id's folder, rewritten whole (mode overwrite) if the batch is replayed, holds the
    batch's rows once; a folder is complete once its write job committed (its files
    are moved out of ``_temporary`` then)."""
    return sorted(path for batch in output.glob("batch=*") if batch.is_dir()
                  for path in batch.glob("part-*.parquet"))


def _differ(a: pa.ChunkedArray, b: pa.ChunkedArray, tolerance: float) -> pa.ChunkedArray:
    """Where ``a`` and ``b`` differ: exactly, or by more than ``tolerance`` relative."""
    if not tolerance:
        return pc.not_equal(a, b)
    return pc.greater(pc.abs(pc.subtract(a, b)), pc.multiply(pc.abs(a), tolerance))


def final_rows(output: pa.Table, *, total_tolerance: float = 0.0
               ) -> tuple[pa.Table, list[str]]:
    """Each key's final row (its largest ``n``) and what is inconsistent: null keys,
    rows of one key with the same count but different totals or means."""
    problems = []
    out = _normalised(output)
    nulls = out["user"].null_count
    if nulls:
        problems.append(f"{nulls:,} rows without a user")
        out = out.filter(pc.is_valid(out["user"]))
    largest = out.group_by("user").aggregate([("n", "max")])
    last = pa.table({"user": largest["user"], "n": largest["n_max"]})
    at_last = out.join(last, keys=["user", "n"], join_type="inner")
    per_key = at_last.group_by("user").aggregate(
        [("n", "max"), ("total", "min"), ("total", "max"), ("avg", "min"), ("avg", "max")])
    disagree = pc.or_(_differ(per_key["total_min"], per_key["total_max"], total_tolerance),
                      _differ(per_key["avg_max"], per_key["avg_min"], MEAN_TOLERANCE))
    bad = per_key.filter(disagree)
    if bad.num_rows:
        problems.append(f"{bad.num_rows:,} users with rows of the same count and different "
                        f"totals or means ({', '.join(bad['user'].to_pylist()[:3])})")
    final = pa.table({"user": per_key["user"], "n": per_key["n_max"],
                      "total": per_key["total_max"], "avg": per_key["avg_max"]})
    return final, problems


def _some(frame: pa.Table, limit: int = 3) -> str:
    return ", ".join(str(u) for u in frame["user"].to_pylist()[:limit])


def check_totals(expected: pa.Table, output: pa.Table, *,
                 total_tolerance: float = 0.0) -> list[str]:
    """What is wrong with ``output`` (update rows, any number per key) against the
    reference: every reference user must appear, no other, and each user's final row
    must have the reference's count, sum and mean (the mean within
    :data:`MEAN_TOLERANCE`, relative; the sum within ``total_tolerance``, relative, 0 for
    exact). Empty when the output is right."""
    final, problems = final_rows(output, total_tolerance=total_tolerance)
    ref = _normalised(expected)
    joined = ref.join(final, keys="user", join_type="full outer", right_suffix="_out",
                      coalesce_keys=True)
    missing = joined.filter(pc.is_null(joined["n_out"]))
    if missing.num_rows:
        problems.append(f"{missing.num_rows:,} of {ref.num_rows:,} users missing "
                        f"({_some(missing)})")
    extra = joined.filter(pc.is_null(joined["n"]))
    if extra.num_rows:
        problems.append(f"{extra.num_rows:,} users that the input has no record of "
                        f"({_some(extra)})")
    both = joined.filter(pc.and_(pc.is_valid(joined["n"]), pc.is_valid(joined["n_out"])))
    mean = pc.divide(both["total"], pc.cast(both["n"], pa.float64()))
    wrong_mean = _differ(mean, both["avg_out"], MEAN_TOLERANCE)
    wrong = both.filter(pc.or_(pc.or_(pc.not_equal(both["n"], both["n_out"]),
                                      _differ(both["total"], both["total_out"],
                                              total_tolerance)),
                               pc.or_(pc.fill_null(wrong_mean, True),
                                      pc.is_nan(both["avg_out"]))))
    if wrong.num_rows:
        first = wrong.slice(0, 1).to_pylist()[0]
        problems.append(f"{wrong.num_rows:,} users with a wrong count, sum or mean "
                        f"({first['user']}: {first['n_out']} records summing "
                        f"{first['total_out']:,.0f}, mean {first['avg_out']!r}; expected "
                        f"{first['n']} and {first['total']:,.0f}, mean {first['avg']!r})")
    return problems
