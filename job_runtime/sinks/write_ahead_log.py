"""The write-ahead sink's log: a checkpoint interval's records spooled locally as Arrow
frames (:class:`ArrowSpool`), staged next to the job's checkpoints, read back for the
send (:func:`read_staged`), and the sink's checkpoint state that lists each staged
interval (:class:`PendingInterval`), versioned because it lives in checkpoints.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from typing import Any, BinaryIO

import pyarrow as pa

from job_runtime.records import Batch
from job_runtime.sinks.interval import Spool

SPOOL_MAGIC = b"CJWA"
SPOOL_VERSION = 1
PENDING_VERSION = 3
"""Version 2 names the job that wrote the interval; version 1 intervals were written by
the job whose checkpoint holds them. Version 3 carries the interval's ``key``, with
which a committer may prove what it records of the interval (the Kafka sink's
markers); an interval of an earlier version has none."""
PENDING_VERSIONS = (1, 2, 3)
_LENGTH = struct.Struct(">Q")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PendingInterval:
    """A staged interval waiting for its send: the sink's checkpoint state, as JSON."""

    checkpoint_id: int
    subtask: int
    uri: str
    records: int
    job: str
    """The identity that wrote it (``SinkContext.job_id``): whose committer knows it."""
    key: str = ""
    """The writer's secret for this interval (hex), see
    :meth:`~job_runtime.sinks.arrival.ArrivalRecord.learn_interval`; empty before version 3."""

    def to_json(self) -> dict[str, Any]:
        return {"version": PENDING_VERSION, "checkpointId": self.checkpoint_id,
                "subtask": self.subtask, "uri": self.uri, "records": self.records,
                "job": self.job, "key": self.key}

    @classmethod
    def from_json(cls, data: Any, *, written_by: str) -> PendingInterval:
        """``written_by``: the job a version 1 interval belongs to (the checkpoint's)."""
        if not isinstance(data, dict) or data.get("version") not in PENDING_VERSIONS:
            raise ValueError(f"not a write-ahead interval of version "
                             f"{' or '.join(map(str, PENDING_VERSIONS))}: {data!r}")
        return cls(checkpoint_id=int(data["checkpointId"]), subtask=int(data["subtask"]),
                   uri=str(data["uri"]), records=int(data["records"]),
                   job=str(data.get("job") or written_by), key=str(data.get("key") or ""))


class ArrowSpool(Spool):
    """The write-ahead sink's interval: each batch a length-prefixed Arrow IPC stream.

    Each batch is a stream of its own (schema and batch), so batches of one interval
    may differ in columns (row-form records need not agree) and are read back as one
    table with their schemas unified (:func:`read_staged`).
    """

    def __init__(self, *, memory_bytes: int) -> None:
        super().__init__(memory_bytes=memory_bytes, prefix="cjob-write-ahead-",
                         header=SPOOL_MAGIC + bytes([SPOOL_VERSION]))
        self.bytes = 0

    def write(self, batch: Batch) -> None:
        arrow = batch.arrow
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, arrow.schema) as writer:
            writer.write_batch(arrow)
        data = sink.getvalue()
        spool = self.spool()
        spool.write(_LENGTH.pack(data.size))
        spool.write(memoryview(data))
        self.records += len(batch)
        self.bytes += _LENGTH.size + data.size


def read_staged(stream: BinaryIO) -> pa.Table:
    """The records of a staged interval as one table (schemas unified)."""
    header = stream.read(len(SPOOL_MAGIC) + 1)
    if header[:len(SPOOL_MAGIC)] != SPOOL_MAGIC or header[len(SPOOL_MAGIC):] != bytes(
            [SPOOL_VERSION]):
        raise ValueError("not a write-ahead interval file of version "
                         f"{SPOOL_VERSION}")
    tables = list(_tables(stream))
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="permissive")


def _tables(stream: BinaryIO) -> Iterator[pa.Table]:
    while prefix := stream.read(_LENGTH.size):
        if len(prefix) != _LENGTH.size:
            raise ValueError("the write-ahead interval file is truncated")
        (length,) = _LENGTH.unpack(prefix)
        data = stream.read(length)
        if len(data) != length:
            raise ValueError("the write-ahead interval file is truncated")
        yield pa.ipc.open_stream(pa.py_buffer(data)).read_all()
