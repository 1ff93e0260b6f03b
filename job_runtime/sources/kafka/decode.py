"""Kafka records as Arrow columns: ``key``, ``value`` (or, with ``value_format="json"``,
the JSON object's fields), ``headers``, ``timestamp`` (ms), ``partition``, ``offset``,
``topic``.

A batch of thousands of records is decoded at once (one JSON parse, metadata columns
built without a Python call per record where the client allows it; after the first
batch, only the JSON fields the pipeline reads); only when that fails are the records
looked at one by one, to name the first bad one by its topic, partition and offset.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa

from job_runtime.errors import UserCodeError
from job_runtime.sources.json_projection import known_types, projected_options
from job_runtime.sources.kafka.plan import KafkaPartition

if TYPE_CHECKING:
    from confluent_kafka import Message

METADATA_COLUMNS = ("key", "headers", "timestamp", "partition", "offset", "topic")
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_NOT_AVAILABLE = 0
"""``confluent_kafka.TIMESTAMP_NOT_AVAILABLE``, written here: the client is imported
lazily, and the constant is compared against a whole column at once."""


@dataclasses.dataclass(kw_only=True)
class _KnownFields:
    """The one thing a decoder learns as it goes (the decoder itself is a value)."""

    schema: pa.Schema | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordDecoder:
    """Decodes the records of one reader: partition ``part``, read by subtask
    ``subtask`` of the source named ``operator`` (which the errors name)."""

    value_format: str
    operator: str
    part: KafkaPartition
    subtask: int
    columns: frozenset[str] | None = None
    """The only columns the pipeline reads (``None``: all of them). The metadata
    columns cost a call into the client per record each, about as much as parsing the
    JSON: a job that counts per user builds none of them."""
    _fields: _KnownFields = dataclasses.field(default_factory=_KnownFields,
                                              init=False, repr=False, compare=False)
    """The JSON fields and types of the latest batch parsed whole: the next batches
    parse only the fields the pipeline reads (:mod:`job_runtime.sources.json_projection`)."""

    def to_arrow(self, messages: list[Message], *,
                 offsets: list[int] | None = None) -> pa.RecordBatch:
        """The records as columns (``offsets``: theirs, when the caller has them)."""
        part, columns = self.part, self.columns
        n = len(messages)
        values = [m.value() for m in messages]
        if self.value_format == "raw":
            fields = {"value": pa.array(values, type=pa.binary())}
        else:
            fields = self._json_fields(values, messages)
        if columns is not None:
            fields = {name: array for name, array in fields.items() if name in columns}
        # The values' own fields win over a metadata column of the same name.
        wanted = [name for name in METADATA_COLUMNS
                  if name not in fields and (columns is None or name in columns)]
        metadata: dict[str, pa.Array] = {}
        for name in wanted:
            if name == "key":
                metadata[name] = pa.array([m.key() for m in messages], type=pa.binary())
            elif name == "headers":
                metadata[name] = _headers_column(messages)
            elif name == "timestamp":
                metadata[name] = _timestamp_column(messages)
            elif name == "partition":
                metadata[name] = pa.repeat(pa.scalar(part.partition, pa.int32()), n)
            elif name == "offset":
                metadata[name] = pa.array([m.offset() for m in messages] if offsets is None
                                          else offsets, type=pa.int64())
            else:
                metadata[name] = pa.repeat(pa.scalar(part.topic, pa.string()), n)
        if self.value_format == "raw" and "key" in metadata:
            columns_out = {"key": metadata.pop("key"), **fields, **metadata}
        else:
            columns_out = {**fields, **metadata}
        return pa.RecordBatch.from_arrays(list(columns_out.values()), names=list(columns_out))

    def error(self, offset: int, *, problem: str) -> UserCodeError:
        """The job's error for the record at ``offset`` of the partition."""
        return UserCodeError(operator=self.operator, subtask=self.subtask, details=(
            f"kafka topic {self.part.topic!r} partition {self.part.partition} offset "
            f"{offset}: {problem}"))

    def _json_fields(self, values: list[bytes | None],
                     messages: list[Message]) -> dict[str, pa.Array]:
        import pyarrow.json as pajson

        # A record without a value (a tombstone) gives nulls in every field.
        present = cast("list[bytes]", values) if None not in values else \
            [b"{}" if v is None else v for v in values]
        data = b"\n".join(present)
        multiline = data.count(b"\n") != len(values) - 1
        # One block: the columns' types are inferred from the whole batch.
        read_options = pajson.ReadOptions(block_size=len(data) + 1)
        table = None
        projected = projected_options(self._fields.schema, self.columns,
                                      newlines_in_values=multiline)
        if projected is not None:
            try:
                table = pajson.read_json(io.BytesIO(data), read_options=read_options,
                                         parse_options=projected)
            except pa.ArrowInvalid:
                table = None  # a read field of another type: parsed whole below
        if table is None:
            try:
                table = pajson.read_json(
                    io.BytesIO(data), read_options=read_options,
                    parse_options=pajson.ParseOptions(newlines_in_values=multiline))
            except pa.ArrowInvalid as exc:
                raise self._bad_json(messages, arrow=str(exc)) from None
            # The fields of the latest batch parsed whole (a field all null in it says
            # nothing of its type) are what the next batches are parsed into.
            self._fields.schema = known_types(table.schema)
        if table.num_rows != len(values):
            raise self._bad_json(messages,
                                 arrow=f"{table.num_rows} rows from {len(values)} values")
        return {name: table.column(name).combine_chunks() for name in table.column_names}

    def _bad_json(self, messages: list[Message], *, arrow: str) -> UserCodeError:
        """The first record whose value is not one JSON object, found one by one."""
        for message in messages:
            value = message.value()
            if value is None:
                continue
            offset = message.offset() or 0
            try:
                decoded = json.loads(value)
            except ValueError as exc:
                return self.error(offset, problem=f"the value is not valid JSON ({exc})")
            if not isinstance(decoded, dict):
                return self.error(offset, problem=f"the value is JSON but not an object "
                                                  f"({type(decoded).__name__})")
        first, last = messages[0].offset() or 0, messages[-1].offset() or 0
        return UserCodeError(operator=self.operator, subtask=self.subtask, details=(
            f"kafka topic {self.part.topic!r} partition {self.part.partition} offsets "
            f"{first}..{last}: the JSON values cannot be decoded into columns together: "
            f"{arrow}"))


def json_object_problem(value: bytes | None) -> str | None:
    """Why ``value`` is not one JSON object (``None``: it is, or it is a tombstone)."""
    if value is None:
        return None
    try:
        decoded = json.loads(value)
    except ValueError as exc:
        return f"the value is not valid JSON ({exc})"
    if not isinstance(decoded, dict):
        return f"the value is JSON but not an object ({type(decoded).__name__})"
    return None


def message_headers(message: Message) -> list[dict[str, Any]]:
    """A record's headers as ``key``/``value`` pairs, the values as bytes."""
    headers = message.headers()
    if not headers:
        return []
    items = headers.items() if isinstance(headers, dict) else headers
    return [{"key": key, "value": value.encode() if isinstance(value, str) else value}
            for key, value in items]


def _headers_column(messages: list[Message]) -> pa.Array:
    found = [m.headers() for m in messages]
    if not any(found):
        # No record has headers (the common case): empty lists, built without a loop.
        return pa.ListArray.from_arrays(
            pa.array(np.zeros(len(messages) + 1, dtype=np.int32)),
            pa.array([], type=HEADERS_TYPE.value_type))
    return pa.array([message_headers(m) for m in messages], type=HEADERS_TYPE)


def _timestamp_column(messages: list[Message]) -> pa.Array:
    """The records' timestamps (ms), null where the record has none: the (kind, value)
    pairs flattened into one numpy array, no Python call per record but the client's."""
    pairs = np.fromiter(itertools.chain.from_iterable(m.timestamp() for m in messages),
                        dtype=np.int64, count=2 * len(messages)).reshape(-1, 2)
    missing = pairs[:, 0] == TIMESTAMP_NOT_AVAILABLE
    return pa.array(pairs[:, 1], type=pa.int64(), mask=missing if missing.any() else None)
