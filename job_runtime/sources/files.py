"""``files``: lines, JSON lines, CSV or Parquet from local paths or ``s3://`` prefixes.

Each file is one split, read as a stream so that a reader holds at most one block
of the file (and what was parsed from it) whatever the file's size.

**Parquet** is read batch by batch through the file's row groups. The position is
the row offset in the file; a reader that starts at row ``n`` skips whole row
groups by the row counts of the file's metadata and drops the rest of ``n`` from
the first row group it reads. Only the columns the pipeline reads are decoded.

**Line formats** (``text``, ``jsonl``, ``csv``) are read in blocks of about
``block_size`` bytes, each cut after the last line end it holds (a line longer than
the block extends it to that line's end; a CSV value in quotes may hold a line
end, so CSV blocks are cut only where the quotes are balanced). The cut depends
only on where the block starts and on ``block_size``, so reading again from a
block's start gives the same block and the same rows. Arrow parses a whole block
at once (no Python code per record) and batches are slices of it.

The position of a line format is a :class:`LinePosition`, kept in checkpoints as
its JSON form: where the current block starts and how many of its rows were
emitted. A restore reads that block again and skips those rows (counting on into
the next blocks should ``block_size`` have changed meanwhile), so it continues
exactly after the last record the checkpoint covered. A plain ``int`` is what
earlier versions stored (a byte offset at a line start; for CSV a row offset) and
still restores.

Arrow infers the types of a JSON or CSV block from the block, so two blocks could
disagree (a column all null in one, integers in one and floats in another). The
types inferred from the file's first block (read again from the file's start on
a restore, so a restored reader yields the same types) are given when parsing
every block (but for columns all null there, whose type the blocks that hold
values tell). A block that does not fit them is parsed again with its own types;
a JSON block that Arrow cannot parse at all (a column of numbers and strings) is
decoded line by line by :func:`json.loads`, which either gives the records as
rows or names the line that is not valid JSON. JSON strings stay strings even where
Arrow would read a timestamp into them.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from collections.abc import Iterator
from typing import IO, Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from cjob_checkpoint.storage.factory import get_filesystem
from job_runtime.errors import PipelineDefinitionError, UserCodeError
from job_runtime.records import Batch, Record
from job_runtime.sources.base import Source, SourceContext, Split, SplitReader

FORMATS = ("text", "jsonl", "csv", "parquet")

DEFAULT_BLOCK_SIZE = 8 * 1024 * 1024
"""Bytes per block of a line format: large enough that Arrow's per-block cost
vanishes, small enough that many readers fit in an executor's memory."""

_ARROW_BLOCK_LIMIT = 2**31 - 1
"""The largest block Arrow's readers take as one chunk (their block size is 32-bit)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinePosition:
    """Where a reader of a line format is: the byte offset at which its current block
    starts (always a line start) and how many rows of that block it emitted.

    Checkpoints carry positions as JSON, so a reader reports :meth:`to_json`;
    :meth:`from_value` reads that form, a :class:`LinePosition` itself, and the plain
    ``int`` earlier versions stored. ``version`` lets a later layout be told apart.
    """

    VERSION: ClassVar[int] = 1

    block_start: int
    row: int = 0
    version: int = VERSION

    def to_json(self) -> dict[str, int]:
        return {"version": self.version, "block_start": self.block_start, "row": self.row}

    @classmethod
    def from_value(cls, value: Any, *, first_block: int, fmt: str) -> LinePosition:
        """The position ``value`` names; ``None`` is the file's first block.

        An ``int`` is the position of earlier versions: a byte offset at a line start
        for text and JSON lines, a row offset for CSV (counted from the first row
        after the header).
        """
        if value is None:
            return cls(block_start=first_block)
        if isinstance(value, LinePosition):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            if fmt == "csv":
                return cls(block_start=first_block, row=value)
            return cls(block_start=max(value, first_block))
        if isinstance(value, dict) and value.get("version") == cls.VERSION:
            block_start, row = value.get("block_start"), value.get("row")
            if isinstance(block_start, int) and isinstance(row, int):
                return cls(block_start=max(block_start, first_block), row=row)
        raise ValueError(f"{value!r} is not a position of the files source")


def _is_hidden(uri: str) -> bool:
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    return name.startswith((".", "_"))


def _balanced_cut(data: bytes | bytearray, *, before: int) -> int:
    """The index after the last line end before ``before`` outside double quotes, or -1.

    ``data`` starts at a record boundary, so a line end ends a record when the
    quotes before it are balanced (CSV escapes a quote by doubling it, which keeps
    the count even).
    """
    end = data.rfind(b"\n", 0, before)
    if end < 0:
        return -1
    odd = data.count(b'"', 0, end) % 2
    while odd:
        previous = data.rfind(b"\n", 0, end)
        if previous < 0:
            return -1
        odd ^= data.count(b'"', previous, end) % 2
        end = previous
    return end + 1


def _cut(data: bytes | bytearray, *, quoted: bool) -> int:
    """The index after the last line end of ``data`` that ends a record, or -1."""
    if quoted and b'"' in data:
        return _balanced_cut(data, before=len(data))
    end = data.rfind(b"\n")
    return end + 1 if end >= 0 else -1


def _first_cut(data: bytes | bytearray, *, quoted: bool) -> int:
    """The index after the first line end of ``data`` that ends a record, or -1."""
    start = 0
    odd = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return -1
        if quoted:
            odd ^= data.count(b'"', start, end) % 2
        if not odd:
            return end + 1
        start = end + 1


class _Blocks:
    """A file cut into blocks that end at record ends, starting at ``start``.

    Each block is the ``block_size`` bytes from its start cut after their last
    record end, or, when they hold none, extended to the first record end after
    them (or to the file's end). What follows the cut is kept and begins the next
    block, so the file is read once and in order.
    """

    def __init__(self, *, file: IO[bytes], start: int, block_size: int, quoted: bool) -> None:
        self._file = file
        self._block_size = block_size
        self._quoted = quoted
        self._carry = b""
        self.next_start = start
        """Where the block that :meth:`read` returns next starts."""
        file.seek(start)

    def _read(self, size: int) -> bytes:
        parts: list[bytes] = []
        while size > 0:
            part = self._file.read(size)
            if not part:
                break
            parts.append(part)
            size -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read(self) -> tuple[int, bytes] | None:
        """The next block and where it starts, or ``None`` at the file's end."""
        start = self.next_start
        data = self._carry + self._read(self._block_size - len(self._carry))
        self._carry = b""
        if not data:
            return None
        if len(data) < self._block_size:
            block = data
        else:
            end = _cut(data, quoted=self._quoted)
            if end < 0:
                grown = bytearray(data)
                while end < 0:
                    more = self._read(self._block_size)
                    if not more:
                        end = len(grown)
                        break
                    searched = len(grown)
                    grown += more
                    if self._quoted:
                        end = _cut(grown, quoted=True)
                    else:
                        found = grown.find(b"\n", searched)
                        end = grown.rfind(b"\n") + 1 if found >= 0 else -1
                data = bytes(grown)
            block, self._carry = data[:end], data[end:]
        self.next_start = start + len(block)
        return start, block


def _read_header(file: IO[bytes], *, chunk: int) -> bytes:
    """A CSV file's first record (its header), with its line end."""
    file.seek(0)
    data = bytearray()
    while True:
        more = file.read(chunk)
        if not more:
            return bytes(data)
        searched = max(0, len(data) - 1)
        data += more
        end = _first_cut(data, quoted=True) if b'"' in data else data.find(b"\n", searched) + 1
        if end > 0:
            return bytes(data[:end])


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    batches = table.to_batches()
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    combined: pa.RecordBatch = table.combine_chunks().to_batches()[0]
    return combined


def _projected(table: pa.Table, columns: frozenset[str] | None) -> pa.Table:
    """``table`` without the columns the pipeline does not read (all of them when it
    names none of the table's: the rows must still arrive)."""
    if columns is None:
        return table
    kept = [name for name in table.column_names if name in columns]
    return table.select(kept) if kept and len(kept) < table.num_columns else table


def _without_null_columns(schema: pa.Schema | None) -> pa.Schema | None:
    """``schema`` without its columns of type null: a column all null in the first
    block says nothing of its type, which the blocks that hold values infer."""
    if schema is None:
        return None
    fields = [f for f in schema if not pa.types.is_null(f.type)]
    return pa.schema(fields) if fields else None


def _as_json_type(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every timestamp (nested ones too) read as the string it was."""
    if pa.types.is_temporal(kind):
        return pa.string()
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_as_json_type(f.type))
                          for f in (kind.field(i) for i in range(kind.num_fields))])
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_as_json_type(kind.value_type)))
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(_as_json_type(kind.value_type)))
    return kind


def _read_json(block: bytes, *, read_options: pajson.ReadOptions,
               parse_options: pajson.ParseOptions) -> pa.Table:
    """A JSON lines block as a table, with JSON's own types only.

    Arrow infers a timestamp for a string that looks like one, which would hand a
    record a ``datetime`` where the file holds a string (and drop a time zone); such
    a block is parsed again with those columns given as strings.
    """
    table = pajson.read_json(pa.BufferReader(block), read_options=read_options,
                             parse_options=parse_options)
    schema = pa.schema([f.with_type(_as_json_type(f.type)) for f in table.schema])
    if schema.equals(table.schema):
        return table
    del table
    return pajson.read_json(pa.BufferReader(block), read_options=read_options,
                            parse_options=pajson.ParseOptions(
                                explicit_schema=schema, unexpected_field_behavior="infer"))


class _LineReader(SplitReader):
    """Reads one file of a line format block by block; see the module docstring."""

    def __init__(self, *, uri: str, file: IO[bytes], fmt: str, position: Any,
                 batch_size: int, block_size: int, columns: frozenset[str] | None,
                 subtask: int) -> None:
        self._uri = uri
        self._file = file
        self._fmt = fmt
        self._batch_size = batch_size
        self._block_size = block_size
        self._columns = columns
        self._subtask = subtask
        self._names: list[str] = []
        first_block = 0
        if fmt == "csv":
            header = _read_header(file, chunk=block_size)
            first_block = len(header)
            if header.strip():
                self._names = pacsv.read_csv(
                    pa.BufferReader(header), read_options=pacsv.ReadOptions(use_threads=False),
                    parse_options=pacsv.ParseOptions(newlines_in_values=True)).column_names
        try:
            start = LinePosition.from_value(position, first_block=first_block, fmt=fmt)
        except ValueError as exc:
            raise UserCodeError(operator=FilesSource.name, subtask=subtask, details=(
                f"file {uri}: the checkpoint's position {position!r} is not one this "
                f"version of the files source reads")) from exc
        self._start = start
        self._first_block = first_block
        self._schema: pa.Schema | None = None
        self._schema_known = fmt == "text"
        if not self._schema_known and start.block_start != first_block:
            self._infer_schema()
        self._blocks = _Blocks(file=file, start=start.block_start, block_size=block_size,
                               quoted=fmt == "csv")
        self._skip = start.row
        self._block_start = start.block_start
        self._current: pa.RecordBatch | list[Record] | None = None
        self._row = 0
        self._started = False

    # ------------------------------------------------------------------ blocks

    def _infer_schema(self) -> None:
        """The types of the file's first block, read from the file's start."""
        blocks = _Blocks(file=self._file, start=self._first_block, block_size=self._block_size,
                         quoted=self._fmt == "csv")
        first = blocks.read()
        if first is not None:
            self._parse(*first)
        self._schema_known = True

    def _parse(self, start: int, block: bytes) -> pa.RecordBatch | list[Record]:
        if self._fmt == "text":
            return self._parse_text(start, block)
        if self._fmt == "csv":
            return self._parse_csv(start, block)
        return self._parse_json(start, block)

    def _parse_text(self, start: int, block: bytes) -> pa.RecordBatch:
        large = len(block) >= _ARROW_BLOCK_LIMIT
        offsets = np.array([0, len(block)], dtype=np.int64 if large else np.int32)
        raw = pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), 1,
                                    [None, pa.py_buffer(offsets), pa.py_buffer(block)])
        try:
            text = raw.cast(pa.large_string() if large else pa.string())
        except pa.ArrowInvalid as exc:
            raise self._bad_data(start, f"the block is not valid UTF-8 ({exc})") from None
        lines = pc.split_pattern(text, "\n").flatten()
        if block.endswith(b"\n"):
            lines = lines.slice(0, len(lines) - 1)
        if b"\r" in block:
            lines = pc.utf8_rtrim(lines, characters="\r")
        return pa.RecordBatch.from_arrays([lines], names=["line"])

    def _parse_csv(self, start: int, block: bytes) -> pa.RecordBatch:
        if not self._names:
            return pa.RecordBatch.from_pylist([])
        read_options = pacsv.ReadOptions(column_names=self._names, use_threads=False,
                                         block_size=min(len(block) + 1, _ARROW_BLOCK_LIMIT))
        parse_options = pacsv.ParseOptions(newlines_in_values=True)
        include = ([n for n in self._names if n in self._columns]
                   if self._columns is not None else [])
        types = {f.name: f.type for f in self._schema} if self._schema is not None else {}
        attempts = [types, {}] if types else [{}]
        problem = ""
        for column_types in attempts:
            try:
                table = pacsv.read_csv(pa.BufferReader(block), read_options=read_options,
                                       parse_options=parse_options,
                                       convert_options=pacsv.ConvertOptions(
                                           column_types=column_types, include_columns=include))
            except pa.ArrowInvalid as exc:
                if "Empty CSV file" in str(exc):
                    return pa.RecordBatch.from_pylist([])
                problem = str(exc)
                continue
            if not self._schema_known:
                self._schema = _without_null_columns(table.schema)
                self._schema_known = True
            return _one_batch(table)
        raise self._bad_data(start, f"the CSV block cannot be read ({problem})")

    def _parse_json(self, start: int, block: bytes) -> pa.RecordBatch | list[Record]:
        if block.isspace():
            return []
        read_options = pajson.ReadOptions(use_threads=False,
                                          block_size=min(len(block) + 1, _ARROW_BLOCK_LIMIT))
        attempts = [pajson.ParseOptions()]
        if self._schema is not None:
            attempts.insert(0, pajson.ParseOptions(explicit_schema=self._schema,
                                                   unexpected_field_behavior="infer"))
        for parse_options in attempts:
            try:
                table = _read_json(block, read_options=read_options, parse_options=parse_options)
            except pa.ArrowInvalid:
                continue
            if not self._schema_known:
                self._schema = _without_null_columns(table.schema)
                self._schema_known = True
            return _one_batch(_projected(table, self._columns))
        self._schema_known = True
        return self._json_rows(start, block)

    def _json_rows(self, start: int, block: bytes) -> list[Record]:
        """The records of a block Arrow cannot parse, one line at a time."""
        rows: list[Record] = []
        offset = 0
        for raw in block.split(b"\n"):
            line_start = offset
            offset += len(raw) + 1
            if not raw.strip():
                continue
            try:
                rows.append(json.loads(raw))
            except UnicodeDecodeError as exc:
                raise self._bad_data(start + line_start,
                                     f"the line is not valid UTF-8 ({exc})") from None
            except ValueError as exc:
                raise self._bad_data(start + line_start,
                                     f"the line is not valid JSON ({exc})") from None
        return rows

    def _bad_data(self, offset: int, problem: str) -> UserCodeError:
        return UserCodeError(operator=FilesSource.name, subtask=self._subtask,
                             details=f"file {self._uri} at byte offset {offset}: {problem}")

    def _next_block(self) -> bool:
        """Load the next block with rows; ``False`` at the file's end."""
        while True:
            read = self._blocks.read()
            if read is None:
                self._current = None
                return False
            start, block = read
            parsed = self._parse(start, block)
            # Whatever the first block held, later blocks are parsed with what it told.
            self._schema_known = True
            del block
            if len(parsed) <= self._skip:
                self._skip -= len(parsed)
                continue
            self._block_start = start
            self._current = parsed
            self._row = self._skip
            self._skip = 0
            return True

    # ------------------------------------------------------------------ reader

    def read_batch(self) -> Batch | None:
        while self._current is None or self._row >= len(self._current):
            self._current = None
            if not self._next_block():
                self._started = True
                return None
        current = self._current
        end = min(self._row + self._batch_size, len(current))
        if isinstance(current, list):
            batch = Batch(rows=current[self._row:end])
        else:
            batch = Batch(arrow=current.slice(self._row, end - self._row))
        self._row = end
        self._started = True
        return batch

    def position(self) -> dict[str, int]:
        if not self._started:
            return self._start.to_json()
        if self._current is None or self._row >= len(self._current):
            return LinePosition(block_start=self._blocks.next_start).to_json()
        return LinePosition(block_start=self._block_start, row=self._row).to_json()

    def close(self) -> None:
        self._current = None
        self._file.close()


class _ParquetReader(SplitReader):
    """Reads one Parquet file batch by batch from a row offset; see the module docstring."""

    def __init__(self, *, file: IO[bytes], offset: int, batch_size: int,
                 columns: frozenset[str] | None) -> None:
        self._file = file
        self._offset = offset
        parquet = pq.ParquetFile(file)
        metadata = parquet.metadata
        first, skip = 0, offset
        while first < metadata.num_row_groups and skip >= metadata.row_group(first).num_rows:
            skip -= metadata.row_group(first).num_rows
            first += 1
        names = None
        if columns is not None:
            names = [n for n in parquet.schema_arrow.names if n in columns] or None
        self._skip = skip
        self._batches: Iterator[pa.RecordBatch] = iter(())
        if first < metadata.num_row_groups:
            self._batches = parquet.iter_batches(
                batch_size=batch_size, row_groups=list(range(first, metadata.num_row_groups)),
                columns=names)

    def read_batch(self) -> Batch | None:
        for batch in self._batches:
            if self._skip:
                if batch.num_rows <= self._skip:
                    self._skip -= batch.num_rows
                    continue
                batch = batch.slice(self._skip)
                self._skip = 0
            if not batch.num_rows:
                continue
            self._offset += batch.num_rows
            return Batch(arrow=batch)
        return None

    def position(self) -> int:
        return self._offset

    def close(self) -> None:
        self._batches = iter(())
        self._file.close()


class FilesSource(Source):
    name = "files"

    def __init__(self, *, paths: list[str], fmt: str, pattern: str | None,
                 batch_size: int | None, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if fmt not in FORMATS:
            raise PipelineDefinitionError(
                problem=f"files source format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        if not paths:
            raise PipelineDefinitionError(problem="files source needs at least one path")
        if batch_size is not None and batch_size < 1:
            raise PipelineDefinitionError(
                problem=f"files source batch_size must be at least 1, got {batch_size}")
        if block_size < 1:
            raise PipelineDefinitionError(
                problem=f"files source block_size must be at least 1, got {block_size}")
        self.paths = paths
        self.fmt = fmt
        self.pattern = pattern
        self.batch_size = batch_size
        self.block_size = block_size

    def _list(self, context: SourceContext) -> list[str]:
        found: list[str] = []
        for path in self.paths:
            fs = get_filesystem(path, s3=context.s3)
            if fs.exists(path) and not path.endswith("/"):
                try:
                    listed = fs.list(path)
                except Exception:
                    listed = []
                found.extend(listed or [path])
            else:
                found.extend(fs.list(path))
        files = sorted({f for f in found if not _is_hidden(f)})
        if self.pattern:
            files = [f for f in files if fnmatch.fnmatch(f.rsplit("/", 1)[-1], self.pattern)]
        return files

    def splits(self, *, context: SourceContext) -> list[Split]:
        return [Split(index=i, description=uri) for i, uri in enumerate(self._list(context))]

    def open(self, split: Split, position: Any, *, context: SourceContext) -> SplitReader:
        uri: str = split.description
        batch_size = self.batch_size or context.batch_size
        file: IO[bytes] = get_filesystem(uri, s3=context.s3).open_read(uri)
        try:
            if self.fmt == "parquet":
                return _ParquetReader(file=file, offset=int(position or 0),
                                      batch_size=batch_size, columns=context.columns)
            return _LineReader(uri=uri, file=file, fmt=self.fmt, position=position,
                               batch_size=batch_size, block_size=self.block_size,
                               columns=context.columns, subtask=context.subtask)
        except BaseException:
            file.close()
            raise


def files(paths: str | list[str], format: str = "text", *, pattern: str | None = None,
          batch_size: int | None = None, block_size: int = DEFAULT_BLOCK_SIZE) -> FilesSource:
    """Read every file under ``paths`` (files or directories, local or ``s3://``).

    ``batch_size`` rows per batch; by default the pipeline's choice (larger when no
    Python function sees single records). ``block_size`` bytes of a text, JSON lines
    or CSV file are read and parsed at a time, which bounds a reader's memory.
    """
    return FilesSource(paths=[paths] if isinstance(paths, str) else list(paths), fmt=format,
                       pattern=pattern, batch_size=batch_size, block_size=block_size)
