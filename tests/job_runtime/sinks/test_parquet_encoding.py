"""The files sink dictionary-encodes the Parquet columns whose values repeat, and writes
the others plain: the same rows, read back, either way."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cjob_checkpoint.storage.local import LocalFileSystem
from job_runtime.records import Batch
from job_runtime.sinks.interval import Interval
from job_runtime.sinks.parquet_encoding import dictionary_columns


def output_like(rows: int) -> pa.Table:
    """An aggregate's output: distinct keys, small counts, float sums; and a status."""
    rng = np.random.default_rng(1)
    return pa.table({
        "user": pa.array([f"user-{i:07d}" for i in range(rows)]),
        "n": pa.array(rng.integers(1, 6, rows)),
        "total": pa.array(rng.random(rows) * 100),
        "status": pa.array(rng.choice(["ok", "late", "dropped"], rows)),
    })


def encodings(data: bytes) -> dict[str, set[str]]:
    metadata = pq.ParquetFile(io.BytesIO(data)).metadata
    found: dict[str, set[str]] = {}
    for group in range(metadata.num_row_groups):
        for column in range(metadata.num_columns):
            chunk = metadata.row_group(group).column(column)
            found.setdefault(chunk.path_in_schema, set()).update(chunk.encodings)
    return found


class TestChoosingTheColumns:
    def test_columns_whose_values_repeat_keep_a_dictionary_and_the_others_do_not(self) -> None:
        assert dictionary_columns(output_like(10_000)) == ["n", "status"]

    def test_a_first_table_too_small_to_judge_keeps_every_dictionary(self) -> None:
        assert dictionary_columns(output_like(100)) is True

    def test_nested_columns_keep_the_writers_default(self) -> None:
        table = output_like(10_000).append_column(
            "tags", pa.array([["a"]] * 10_000, type=pa.list_(pa.string())))
        assert dictionary_columns(table) is True

    def test_a_column_of_nulls_is_one_repeated_value(self) -> None:
        table = output_like(10_000).append_column("note", pa.nulls(10_000, type=pa.string()))
        assert "note" in dictionary_columns(table)  # type: ignore[operator]


class TestTheSinksFiles:
    def written(self, table: pa.Table, tmp_path: Path) -> bytes:
        interval = Interval(fmt="parquet", memory_bytes=1 << 30)
        for batch in table.to_batches(max_chunksize=4096):
            interval.write(Batch(arrow=batch))
        staged = tmp_path / "interval.parquet"
        interval.stage(LocalFileSystem(), str(staged))
        interval.close()
        return staged.read_bytes()

    def test_distinct_keys_are_written_plain_and_repeated_values_with_a_dictionary(
        self, tmp_path: Path
    ) -> None:
        found = encodings(self.written(output_like(20_000), tmp_path))
        dictionary = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
        assert not found["user"] & dictionary and not found["total"] & dictionary
        assert found["n"] & dictionary and found["status"] & dictionary

    def test_the_rows_read_back_as_written(self, tmp_path: Path) -> None:
        table = output_like(20_000)
        assert pq.read_table(io.BytesIO(self.written(table, tmp_path))).equals(table)
