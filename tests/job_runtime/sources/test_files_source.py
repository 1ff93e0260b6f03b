"""The files source streams a file in blocks: it reads the same records as parsing the
whole file would, continues exactly after the last record on a restore from any
position (also one written by earlier versions), keeps its JSON types stable from
block to block, names a malformed line, and holds a bounded amount of memory
whatever the file's size."""

from __future__ import annotations

import csv
import json
import math
import tracemalloc
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from job_runtime.errors import UserCodeError
from job_runtime.sources.files_source import FilesSource, LinePosition, files
from job_runtime.sources.source_contract import RECORD_BATCH_SIZE, SourceContext, SplitReader

CONTEXT = SourceContext(subtask=0, parallelism=1, staging_uri="unused")
BLOCK = 64

JSON_LINES = (
    b'{"id": 1, "name": "a", "score": 1}\n'
    b"\n"
    b'{"id": 2, "name": "bb", "score": 2, "tags": ["x", "y"]}\r\n'
    b'{"id": 3, "name": "' + b"long" * 40 + b'", "score": 3}\n'
    b"   \n"
    b'{"id": 4, "name": null, "score": 4, "nested": {"k": 1}}\n'
    + b"".join(b'{"id": %d, "name": "n%d", "score": %d}\n' % (i, i, i) for i in range(5, 40))
    + b'{"id": 40, "name": "last", "score": 40}'
)

TEXT = (
    b"first line\n"
    b"\n"
    b"crlf line\r\n"
    + b"x" * 150 + b"\n"
    + b"".join(b"line %d\n" % i for i in range(60))
    + "caf\u00e9 \u2603\n".encode()
    + b"no newline at the end"
)

CSV = (
    b"id,name,score\r\n"
    + b'1,"quoted, with comma",1.5\r\n'
    + b'2,"a value over\ntwo lines",2.5\n'
    + b"3," + b"y" * 100 + b",3.5\n"
    + b"".join(b"%d,row%d,%d.25\n" % (i, i, i) for i in range(4, 50))
    + b"50,end,50.0"
)


MIXED_JSON = (
    b"".join(b'{"a": %d}\n' % i for i in range(20))
    + b"".join(b'{"a": %d.5}\n' % i for i in range(20))
    + b'{"a": "text"}\n{"a": 7}\n{"a": [1]}\n'
    + b"".join(b'{"a": %d}\n' % i for i in range(20))
)
"""Integers in the first blocks, floats later, then a block Arrow cannot parse."""


def write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def expected_json(data: bytes) -> list[Any]:
    return [json.loads(line) for line in data.split(b"\n") if line.strip()]


def expected_text(data: bytes) -> list[dict[str, str]]:
    if not data:
        return []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return [{"line": line.decode().rstrip("\r")} for line in lines]


def expected_csv(data: bytes) -> list[dict[str, Any]]:
    reader = csv.DictReader(data.decode().splitlines(keepends=True))
    return [{"id": int(r["id"]), "name": r["name"], "score": float(r["score"])} for r in reader]


def open_reader(source: FilesSource, position: Any = None,
                context: SourceContext = CONTEXT) -> SplitReader:
    (split,) = source.splits(context=context)
    return source.open(split, position, context=context)


def read_all(reader: SplitReader) -> list[Any]:
    rows: list[Any] = []
    while (batch := reader.read_batch()) is not None:
        rows.extend(batch.rows)
    reader.close()
    return rows


def without_nulls(rows: list[Any]) -> list[Any]:
    """Records as JSON gives them: Arrow gives a field a record lacks as ``None``."""
    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value
    return [clean(r) for r in rows]


def parquet_file(tmp_path: Path) -> tuple[str, list[dict[str, Any]]]:
    rows = [{"id": i, "name": f"n{i}", "score": i / 4} for i in range(103)]
    path = tmp_path / "data.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=10)
    assert pq.ParquetFile(path).metadata.num_row_groups == 11
    return str(path), rows


# --------------------------------------------------------------------------- reading


@pytest.mark.parametrize("data", [JSON_LINES, JSON_LINES + b"\n\n", b"", b"\n\n"])
def test_json_lines_read_the_records_json_gives_line_by_line(tmp_path: Path,
                                                              data: bytes) -> None:
    source = files(write(tmp_path, "in.jsonl", data), "jsonl", block_size=BLOCK)
    assert without_nulls(read_all(open_reader(source))) == without_nulls(expected_json(data))


@pytest.mark.parametrize("data", [TEXT, TEXT + b"\n", b"", b"\n", b"\r\n\r\n"])
def test_text_reads_every_line_without_its_line_end(tmp_path: Path, data: bytes) -> None:
    source = files(write(tmp_path, "in.txt", data), "text", block_size=BLOCK)
    assert read_all(open_reader(source)) == expected_text(data)


@pytest.mark.parametrize("data", [CSV, CSV + b"\n", b"id,name,score\n", b""])
def test_csv_reads_the_records_the_csv_module_gives(tmp_path: Path, data: bytes) -> None:
    source = files(write(tmp_path, "in.csv", data), "csv", block_size=BLOCK)
    assert read_all(open_reader(source)) == expected_csv(data)


def test_parquet_reads_the_table_in_batches_of_the_given_size(tmp_path: Path) -> None:
    path, rows = parquet_file(tmp_path)
    reader = open_reader(files(path, "parquet", batch_size=7))
    sizes = []
    read: list[Any] = []
    while (batch := reader.read_batch()) is not None:
        sizes.append(len(batch))
        read.extend(batch.rows)
    assert read == pq.read_table(path).to_pylist() == rows
    assert max(sizes) <= 7


def test_parquet_decodes_only_the_columns_the_pipeline_reads(tmp_path: Path) -> None:
    path, rows = parquet_file(tmp_path)
    context = SourceContext(subtask=0, parallelism=1, staging_uri="unused",
                            columns=frozenset({"score", "absent"}))
    read = read_all(open_reader(files(path, "parquet"), context=context))
    assert read == [{"score": r["score"]} for r in rows]


def test_json_lines_keep_every_column_the_pipeline_reads(tmp_path: Path) -> None:
    context = SourceContext(subtask=0, parallelism=1, staging_uri="unused",
                            columns=frozenset({"id"}))
    source = files(write(tmp_path, "in.jsonl", JSON_LINES), "jsonl", block_size=BLOCK)
    assert [r["id"] for r in read_all(open_reader(source, context=context))] == \
        [r["id"] for r in expected_json(JSON_LINES)]


def every_batch(reader: SplitReader) -> list[Any]:
    batches = []
    while (batch := reader.read_batch()) is not None:
        batches.append(batch)
    reader.close()
    return batches


def with_columns(*names: str) -> SourceContext:
    return SourceContext(subtask=0, parallelism=1, staging_uri="unused",
                         columns=frozenset(names))


def test_json_lines_build_only_the_fields_the_pipeline_reads_once_their_types_are_known(
        tmp_path: Path) -> None:
    source = files(write(tmp_path, "in.jsonl", JSON_LINES), "jsonl", block_size=BLOCK * 4)
    batches = every_batch(open_reader(source, context=with_columns("id", "score")))
    assert len(batches) > 2
    assert {tuple(b.arrow.schema.names) for b in batches[1:] if b.arrow.num_rows} == \
        {("id", "score")}
    assert [r for b in batches for r in b.rows] == \
        [{"id": r["id"], "score": r["score"]} for r in expected_json(JSON_LINES)]


def test_an_unread_field_of_mixed_types_leaves_the_block_to_arrow(tmp_path: Path) -> None:
    extras = [b'"text"', b"[1]", b"1.5", b'{"k": 1}']
    data = (b"".join(b'{"id": %d, "extra": %d}\n' % (i, i) for i in range(20))
            + b"".join(b'{"id": %d, "extra": %s}\n' % (i, extras[i % 4]) for i in range(20, 42)))
    source = files(write(tmp_path, "in.jsonl", data), "jsonl", block_size=BLOCK * 4)
    batches = every_batch(open_reader(source, context=with_columns("id")))
    assert all(b.has_arrow for b in batches)
    assert [r["id"] for b in batches for r in b.rows] == list(range(42))


def test_a_read_field_first_seen_in_a_later_block_is_kept(tmp_path: Path) -> None:
    data = (b"".join(b'{"a": %d}\n' % i for i in range(20))
            + b"".join(b'{"a": %d, "b": "v%d"}\n' % (i, i) for i in range(20, 40)))
    source = files(write(tmp_path, "in.jsonl", data), "jsonl", block_size=BLOCK)
    rows = read_all(open_reader(source, context=with_columns("a", "b")))
    assert without_nulls(rows) == expected_json(data)


def test_a_read_field_whose_type_changes_is_read_with_the_blocks_own_type(
        tmp_path: Path) -> None:
    source = files(write(tmp_path, "in.jsonl", MIXED_JSON), "jsonl", block_size=BLOCK)
    rows = read_all(open_reader(source, context=with_columns("a")))
    assert rows == expected_json(MIXED_JSON)


def test_batches_are_arrow_and_no_larger_than_the_batch_size(tmp_path: Path) -> None:
    source = files(write(tmp_path, "in.txt", TEXT), "text", batch_size=5, block_size=4096)
    reader = open_reader(source)
    while (batch := reader.read_batch()) is not None:
        assert batch.has_arrow
        assert len(batch) <= 5
    reader.close()


def test_without_a_batch_size_the_pipelines_batch_size_is_used(tmp_path: Path) -> None:
    lines = b"".join(b"%d\n" % i for i in range(100))
    source = files(write(tmp_path, "in.txt", lines), "text")
    assert source.batch_size is None
    context = SourceContext(subtask=0, parallelism=1, staging_uri="unused", batch_size=30)
    reader = open_reader(source, context=context)
    assert len(reader.read_batch() or []) == 30
    reader.close()
    assert len(open_reader(source).read_batch() or []) == min(RECORD_BATCH_SIZE, 100)


# --------------------------------------------------------------------------- restore


FORMAT_FILES = [
    ("jsonl", "in.jsonl", JSON_LINES),
    ("jsonl", "mixed.jsonl", MIXED_JSON),
    ("text", "in.txt", TEXT),
    ("csv", "in.csv", CSV),
]


def read_batches(source: Any, count: int) -> tuple[list[Any], Any]:
    """The records of a new reader's first ``count`` batches, and its position after."""
    reader = open_reader(source)
    before: list[Any] = []
    for _ in range(count):
        batch = reader.read_batch()
        if batch is not None:
            before.extend(batch.rows)
    position = reader.position()
    reader.close()
    return before, position


@pytest.mark.parametrize(("fmt", "name", "data"), FORMAT_FILES)
@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_a_restore_from_any_position_continues_after_the_last_record_read(
        tmp_path: Path, fmt: str, name: str, data: bytes, batch_size: int) -> None:
    source = files(write(tmp_path, name, data), fmt, batch_size=batch_size, block_size=BLOCK)
    everything = read_all(open_reader(source))
    assert everything
    for k in range(math.ceil(len(everything) / batch_size) + 2):
        before, position = read_batches(source, k)
        position = json.loads(json.dumps(position))
        after = read_all(open_reader(source, position))
        assert before + after == everything, f"restored after {k} batches at {position}"


@pytest.mark.parametrize("batch_size", [1, 4, 10, 25])
def test_a_parquet_restore_continues_after_the_last_row_read(tmp_path: Path,
                                                             batch_size: int) -> None:
    path, rows = parquet_file(tmp_path)
    source = files(path, "parquet", batch_size=batch_size)
    for k in range(len(rows) // batch_size + 2):
        before, position = read_batches(source, k)
        assert position == len(before)
        assert before + read_all(open_reader(source, position)) == rows


def test_a_restore_goes_on_from_the_block_and_row_a_position_names(tmp_path: Path) -> None:
    source = files(write(tmp_path, "in.txt", TEXT), "text", batch_size=2, block_size=BLOCK)
    reader = open_reader(source)
    reader.read_batch()
    position = reader.position()
    assert position == LinePosition(block_start=0, row=2).to_json()
    assert position["version"] == LinePosition.VERSION
    reader.close()
    assert read_all(open_reader(source, LinePosition(block_start=0, row=2))) == \
        expected_text(TEXT)[2:]


@pytest.mark.parametrize(("fmt", "name", "data"), [
    ("jsonl", "in.jsonl", JSON_LINES), ("text", "in.txt", TEXT)])
def test_a_byte_offset_that_earlier_versions_stored_restores_at_that_line(
        tmp_path: Path, fmt: str, name: str, data: bytes) -> None:
    source = files(write(tmp_path, name, data), fmt, block_size=BLOCK)
    offset = 0
    for _ in range(5):
        offset = data.index(b"\n", offset) + 1
    rest = data[offset:]
    expected = without_nulls(expected_json(rest)) if fmt == "jsonl" else expected_text(rest)
    read = read_all(open_reader(source, offset))
    assert (without_nulls(read) if fmt == "jsonl" else read) == expected


def test_a_row_offset_that_earlier_versions_stored_for_csv_restores_at_that_row(
        tmp_path: Path) -> None:
    source = files(write(tmp_path, "in.csv", CSV), "csv", block_size=BLOCK)
    assert read_all(open_reader(source, 17)) == expected_csv(CSV)[17:]


def test_a_position_of_another_kind_is_refused_with_the_file_named(tmp_path: Path) -> None:
    path = write(tmp_path, "in.txt", TEXT)
    with pytest.raises(UserCodeError, match=r"in\.txt"):
        open_reader(files(path, "text"), {"version": 99, "block_start": 0, "row": 0})


# --------------------------------------------------------------------------- JSON types


def test_json_types_stay_those_of_the_first_block_when_a_later_block_lacks_values(
        tmp_path: Path) -> None:
    data = (b"".join(b'{"a": %d, "b": "x"}\n' % i for i in range(20))
            + b"".join(b'{"a": null, "b": null}\n' for _ in range(20))
            + b"".join(b'{"b": "y"}\n' for _ in range(20)))
    source = files(write(tmp_path, "in.jsonl", data), "jsonl", batch_size=1000,
                   block_size=BLOCK * 4)
    reader = open_reader(source)
    types = set()
    rows: list[Any] = []
    while (batch := reader.read_batch()) is not None:
        types.add(batch.arrow.schema.field("a").type)
        rows.extend(batch.rows)
    assert types == {pa.int64()}
    assert without_nulls(rows) == without_nulls(expected_json(data))


def test_json_integers_then_floats_then_mixed_types_still_read(tmp_path: Path) -> None:
    source = files(write(tmp_path, "in.jsonl", MIXED_JSON), "jsonl", block_size=BLOCK)
    reader = open_reader(source)
    rows: list[Any] = []
    kinds = set()
    while (batch := reader.read_batch()) is not None:
        kinds.add(str(batch.arrow.schema.field("a").type) if batch.has_arrow else "rows")
        rows.extend(batch.rows)
    reader.close()
    assert rows == expected_json(MIXED_JSON)
    assert kinds == {"int64", "double", "rows"}


def test_a_restored_reader_gives_the_types_a_reader_from_the_start_gives(
        tmp_path: Path) -> None:
    data = (b"".join(b'{"a": %d, "c": null}\n' % i for i in range(10))
            + b"".join(b'{"a": null, "c": "s"}\n' for i in range(10))
            + b"".join(b'{"a": %d}\n' % i for i in range(10)))
    source = files(write(tmp_path, "in.jsonl", data), "jsonl", batch_size=1000,
                   block_size=BLOCK * 2)
    fresh = open_reader(source)
    schemas = []
    while (batch := fresh.read_batch()) is not None:
        schemas.append((fresh.position(), batch.arrow.schema))
    fresh.close()
    for position, schema in schemas[:-1]:
        restored = open_reader(source, position)
        batch = restored.read_batch()
        assert batch is not None
        assert batch.arrow.schema.field("a").type == schema.field("a").type == pa.int64()
        restored.close()


def test_json_strings_that_look_like_times_stay_strings(tmp_path: Path) -> None:
    data = (b'{"ts": "2024-01-01T00:00:00Z", "in": {"day": "2024-01-01"}}\n'
            + b"".join(b'{"ts": "2024-01-0%dT10:00:00", "at": ["2024-02-01"]}\n' % d
                       for d in range(1, 10)))
    source = files(write(tmp_path, "in.jsonl", data), "jsonl", block_size=BLOCK)
    assert without_nulls(read_all(open_reader(source))) == expected_json(data)


def test_a_malformed_json_line_is_named_by_its_file_and_byte_offset(tmp_path: Path) -> None:
    good = b'{"a": 1}\n{"a": 2}\n'
    path = write(tmp_path, "broken.jsonl", good + b'{"a": 3,\n{"a": 4}\n')
    reader = open_reader(files(path, "jsonl", block_size=BLOCK))
    with pytest.raises(UserCodeError) as raised:
        read_all(reader)
    message = str(raised.value)
    assert path in message
    assert f"byte offset {len(good)}" in message
    assert "not valid JSON" in message


# --------------------------------------------------------------------------- memory


def _peak_while_reading(source: FilesSource) -> tuple[int, int]:
    """Rows read and the peak of Arrow's and Python's allocations meanwhile."""
    reader = open_reader(source)
    rows = 0
    arrow_base = pa.total_allocated_bytes()
    arrow_peak = 0
    tracemalloc.start()
    try:
        while (batch := reader.read_batch()) is not None:
            rows += len(batch)
            arrow_peak = max(arrow_peak, pa.total_allocated_bytes() - arrow_base)
        _, python_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        reader.close()
    return rows, arrow_peak + python_peak


@pytest.mark.parametrize(("fmt", "line"), [
    ("jsonl", b'{"id": 123456, "user": "someone", "amount": 12.5, "tags": ["a", "b"]}\n'),
    ("text", b"a line of text that is neither short nor long, as lines go\n"),
])
def test_a_file_far_larger_than_the_memory_limit_is_read_in_bounded_memory(
        tmp_path: Path, fmt: str, line: bytes) -> None:
    limit = 16 * 1024 * 1024
    chunk = line * (1024 * 1024 // len(line))
    count = 60
    path = tmp_path / f"big.{fmt}"
    with path.open("wb") as out:
        for _ in range(count):
            out.write(chunk)
    assert path.stat().st_size > 3 * limit
    source = files(str(path), fmt, batch_size=RECORD_BATCH_SIZE, block_size=1024 * 1024)
    rows, peak = _peak_while_reading(source)
    assert rows == count * chunk.count(b"\n")
    assert peak < limit, f"{peak / 2**20:.1f} MiB while reading"
