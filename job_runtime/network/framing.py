"""The wire format of a channel: a fixed header, then the payload.

Header: kind (1 byte), payload length (4 bytes), an integer argument (8 bytes,
the checkpoint id for barriers and cancel markers, the credit count for credit
announcements). Arrow batches travel as Arrow IPC streams, under a kind of their
own when they hold partial aggregates (the batch's :class:`BatchKind`); row batches (what
record functions produce, which may not have one schema) are pickled.

A channel carries frames only after both ends proved they hold the attempt's
key (:mod:`job_runtime.network.handshake`), and every frame ends with a tag over
its sequence number, header and payload that the receiver checks before it
looks at the payload: the only pickles a subtask loads come from an
authenticated peer of the same job attempt, unaltered.
"""

from __future__ import annotations

import dataclasses
import enum
import pickle
import socket
import struct
from typing import Any

import pyarrow as pa

from job_runtime.network.handshake import TAG_BYTES, FrameMac, FrameRejected
from job_runtime.records import Batch, BatchKind

HEADER = struct.Struct(">BIq")
MAX_PAYLOAD_BYTES = 1 << 30
"""Even an authenticated peer's frame is refused beyond this: it would be a bug."""


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
    WATERMARK = 9
    """The sender's event-time watermark (ms since the epoch): no record of it older
    than this follows. In band, behind the records it covers."""
    IDLE = 10
    """The sender has no input for now: its watermark holds nobody back until it sends
    records or a watermark again."""
    PARTIAL = 11
    """A batch of partial aggregates (:attr:`BatchKind.PARTIAL`) as an Arrow IPC stream."""


DATA_KINDS = (Kind.ARROW, Kind.ROWS, Kind.PARTIAL)
BARRIER_KINDS = (Kind.BARRIER, Kind.FINAL_BARRIER)


class ChannelClosed(Exception):
    """The peer closed the connection, or broke the protocol."""


_HELLO = struct.Struct(">BII")
HELLO_VERSION = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChannelHello:
    """The first frame of a channel: which stage's input it feeds, from which subtask."""

    stage: int
    sender: int

    def encode(self) -> bytes:
        return _HELLO.pack(HELLO_VERSION, self.stage, self.sender)

    @classmethod
    def decode(cls, data: bytes) -> ChannelHello:
        if len(data) != _HELLO.size or data[0] != HELLO_VERSION:
            raise ChannelClosed(f"a channel greeting of {len(data)} bytes, version "
                                f"{data[0] if data else None}, is not version {HELLO_VERSION}")
        _, stage, sender = _HELLO.unpack(data)
        return cls(stage=stage, sender=sender)


def encode_batch(batch: Batch) -> tuple[Kind, bytes]:
    partial = batch.kind is BatchKind.PARTIAL
    if batch.has_arrow or partial:
        sink = pa.BufferOutputStream()
        arrow = batch.arrow
        with pa.ipc.new_stream(sink, arrow.schema) as writer:
            writer.write_batch(arrow)
        return Kind.PARTIAL if partial else Kind.ARROW, sink.getvalue().to_pybytes()
    return Kind.ROWS, pickle.dumps(batch.rows, protocol=pickle.HIGHEST_PROTOCOL)


def decode_batch(kind: Kind, payload: bytes) -> Batch:
    if kind in (Kind.ARROW, Kind.PARTIAL):
        batch_kind = BatchKind.PARTIAL if kind == Kind.PARTIAL else BatchKind.RECORDS
        reader = pa.ipc.open_stream(pa.py_buffer(payload))
        batches = list(reader)
        if len(batches) == 1:
            return Batch(arrow=batches[0], kind=batch_kind)
        return Batch.of(pa.Table.from_batches(batches, schema=reader.schema), kind=batch_kind)
    rows: list[dict[str, Any]] = pickle.loads(payload)
    return Batch(rows=rows)


def send_frame(sock: socket.socket, kind: Kind, arg: int = 0, payload: bytes = b"", *,
               mac: FrameMac | None) -> None:
    """Send one frame; with ``mac``, tagged (``None`` only where nothing is authenticated)."""
    header = HEADER.pack(int(kind), len(payload), arg)
    tag = b"" if mac is None else mac.tag(header, payload)
    if len(payload) > 1 << 16:
        sock.sendall(header)
        sock.sendall(payload)
        sock.sendall(tag)
    else:
        sock.sendall(header + payload + tag)


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


def recv_frame(sock: socket.socket, *, mac: FrameMac | None) -> tuple[Kind, int, bytes]:
    """The next frame, its tag checked against ``mac`` before anything else looks at it."""
    header = _recv_exact(sock, HEADER.size)
    kind, length, arg = HEADER.unpack(header)
    if length > MAX_PAYLOAD_BYTES:
        raise ChannelClosed(f"a frame of {length} bytes exceeds the limit of "
                            f"{MAX_PAYLOAD_BYTES}")
    payload = _recv_exact(sock, length) if length else b""
    if mac is not None:
        try:
            mac.check(_recv_exact(sock, TAG_BYTES), header, payload)
        except FrameRejected as exc:
            raise ChannelClosed(str(exc)) from exc
    try:
        return Kind(kind), arg, payload
    except ValueError:
        raise ChannelClosed(f"unknown frame kind {kind}") from None
