"""Reading one file of a line format (``text``, ``jsonl``, ``csv``) block by block.

The blocks (:mod:`job_runtime.sources.line_blocks`) end at record ends. Arrow parses
a whole block at once (no Python code per record) and batches are slices of it.

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
Arrow would read a timestamp into them. Once the types are known, a pipeline that reads
only some fields gets only those parsed (:mod:`job_runtime.sources.json_projection`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import IO, Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from job_runtime.errors import UserCodeError
from job_runtime.records import Batch, Record
from job_runtime.sources.json_projection import known_types, projected_options
from job_runtime.sources.line_blocks import Blocks, read_header
from job_runtime.sources.source_contract import SplitReader

SOURCE_NAME = "files"
"""The files source's name (its ``Source.name``), which a reader's errors give."""

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


class LineReader(SplitReader):
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
            header = read_header(file, chunk=block_size)
            first_block = len(header)
            if header.strip():
                self._names = pacsv.read_csv(
                    pa.BufferReader(header), read_options=pacsv.ReadOptions(use_threads=False),
                    parse_options=pacsv.ParseOptions(newlines_in_values=True)).column_names
        try:
            start = LinePosition.from_value(position, first_block=first_block, fmt=fmt)
        except ValueError as exc:
            raise UserCodeError(operator=SOURCE_NAME, subtask=subtask, details=(
                f"file {uri}: the checkpoint's position {position!r} is not one this "
                f"version of the files source reads")) from exc
        self._start = start
        self._first_block = first_block
        self._schema: pa.Schema | None = None
        self._schema_known = fmt == "text"
        if not self._schema_known and start.block_start != first_block:
            self._infer_schema()
        self._blocks = Blocks(file=file, start=start.block_start, block_size=block_size,
                               quoted=fmt == "csv")
        self._skip = start.row
        self._block_start = start.block_start
        self._current: pa.RecordBatch | list[Record] | None = None
        self._row = 0
        self._started = False

    # ------------------------------------------------------------------ blocks

    def _infer_schema(self) -> None:
        """The types of the file's first block, read from the file's start."""
        blocks = Blocks(file=self._file, start=self._first_block, block_size=self._block_size,
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
                self._schema = known_types(table.schema)
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
            projected = projected_options(self._schema, self._columns)
            if projected is not None:
                attempts.insert(0, projected)
        for parse_options in attempts:
            try:
                table = _read_json(block, read_options=read_options, parse_options=parse_options)
            except pa.ArrowInvalid:
                continue
            if not self._schema_known:
                self._schema = known_types(table.schema)
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
        return UserCodeError(operator=SOURCE_NAME, subtask=self._subtask,
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
