"""The wire format of a channel: a fixed header, then the payload.

Header: kind (1 byte), payload length (4 bytes), an integer argument (8 bytes,
the checkpoint id for barriers and cancel markers, the credit count for credit
announcements). Arrow batches travel as Arrow IPC streams; row batches (what
record functions produce, which may not have one schema) are pickled.
"""

from __future__ import annotations

import enum
import pickle
import socket
import struct
from typing import Any

import pyarrow as pa

from job_runtime.records import Batch

HEADER = struct.Struct(">BIq")


class Kind(enum.IntEnum):
    ARROW = 1
    ROWS = 2
    BARRIER = 3
    CANCEL = 4
    END = 5
    CREDIT = 6
    HELLO = 7
    FINAL_BARRIER = 8
    """The barrier of the job's final checkpoint: never overtakes data (see barriers)."""


DATA_KINDS = (Kind.ARROW, Kind.ROWS)
BARRIER_KINDS = (Kind.BARRIER, Kind.FINAL_BARRIER)


class ChannelClosed(Exception):
    """The peer closed the connection."""


def encode_batch(batch: Batch) -> tuple[Kind, bytes]:
    if batch.has_arrow:
        sink = pa.BufferOutputStream()
        arrow = batch.arrow
        with pa.ipc.new_stream(sink, arrow.schema) as writer:
            writer.write_batch(arrow)
        return Kind.ARROW, sink.getvalue().to_pybytes()
    return Kind.ROWS, pickle.dumps(batch.rows, protocol=pickle.HIGHEST_PROTOCOL)


def decode_batch(kind: Kind, payload: bytes) -> Batch:
    if kind == Kind.ARROW:
        reader = pa.ipc.open_stream(pa.py_buffer(payload))
        batches = list(reader)
        if len(batches) == 1:
            return Batch(arrow=batches[0])
        return Batch.of(pa.Table.from_batches(batches, schema=reader.schema))
    rows: list[dict[str, Any]] = pickle.loads(payload)
    return Batch(rows=rows)


def send_frame(sock: socket.socket, kind: Kind, arg: int = 0, payload: bytes = b"") -> None:
    sock.sendall(HEADER.pack(int(kind), len(payload), arg) + payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    remaining = n
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise ChannelClosed("connection closed by peer")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> tuple[Kind, int, bytes]:
    kind, length, arg = HEADER.unpack(_recv_exact(sock, HEADER.size))
    payload = _recv_exact(sock, length) if length else b""
    return Kind(kind), arg, payload
