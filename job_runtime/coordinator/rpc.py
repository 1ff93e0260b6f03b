"""Connections between the coordinator (driver) and the subtasks (Spark tasks).

One TCP connection per subtask. It starts with the mutual handshake of
:mod:`job_runtime.network.handshake` (the per-attempt key), and then carries
length-prefixed JSON messages (:mod:`job_runtime.coordinator.messages`), each
followed by a tag over its sequence number and bytes. Nothing from the network is
unpickled. The coordinator's endpoint is its own, not Spark's: a Spark barrier
stage offers only collective calls, and a ``barrier()`` costs about a second,
far too much for a checkpoint every second.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
from collections.abc import Callable

from job_runtime.coordinator.messages import (
    Message,
    MessageError,
    ToCoordinator,
    ToSubtask,
    decode_to_coordinator,
    decode_to_subtask,
    encode,
)
from job_runtime.network.admission import MAX_UNAUTHENTICATED, HandshakeSlots
from job_runtime.network.handshake import (
    HANDSHAKE_TIMEOUT,
    TAG_BYTES,
    FrameRejected,
    HandshakeFailed,
    Purpose,
    Session,
    client_handshake,
    server_handshake,
)
from job_runtime.rate_limited_log import RateLimitedLog

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")
MAX_MESSAGE_BYTES = 64 << 20
"""An authenticated peer's message is still refused beyond this (a bug, not a checkpoint)."""


class ConnectionLost(Exception):
    """The other end of an RPC connection went away, or broke the protocol."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    parts = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionLost("connection closed")
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


class RpcConnection:
    """One authenticated, framed, thread-safe duplex connection."""

    def __init__(self, *, sock: socket.socket, session: Session,
                 decode: Callable[[bytes], Message]) -> None:
        self.sock = sock
        self._session = session
        self._decode = decode
        self._send_lock = threading.Lock()
        self.closed = False

    def send(self, message: Message) -> None:
        data = encode(message)
        with self._send_lock:
            tag = self._session.outgoing.tag(data)
            try:
                self.sock.sendall(_LENGTH.pack(len(data)) + data + tag)
            except OSError as exc:
                raise ConnectionLost(str(exc)) from exc

    def receive_raw(self) -> Message:
        """The next message; raises :class:`ConnectionLost`, :class:`FrameRejected` or
        :class:`MessageError` (then the connection is of no further use)."""
        try:
            (length,) = _LENGTH.unpack(_recv_exact(self.sock, _LENGTH.size))
            if length > MAX_MESSAGE_BYTES:
                raise MessageError(f"a control message of {length} bytes exceeds the limit "
                                   f"of {MAX_MESSAGE_BYTES}")
            data = _recv_exact(self.sock, length)
            tag = _recv_exact(self.sock, TAG_BYTES)
        except OSError as exc:
            raise ConnectionLost(str(exc)) from exc
        self._session.incoming.check(tag, data)
        return self._decode(data)

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class SubtaskConnection(RpcConnection):
    """A subtask's end: it receives what the coordinator sends."""

    def receive(self) -> ToSubtask:
        """The next message; a broken or malformed one ends the connection."""
        try:
            message = self.receive_raw()
        except (FrameRejected, MessageError) as exc:
            self.close()
            raise ConnectionLost(f"the coordinator sent something unacceptable: {exc}") from exc
        assert not isinstance(message, ToCoordinator)
        return message


class RpcServer:
    """Accepts subtask connections and hands each message to ``handler``.

    A peer has ``handshake_timeout`` in all for its handshake, and at most
    ``max_unauthenticated`` connections wait for theirs at once: a newcomer past them
    drops the oldest (:mod:`job_runtime.network.admission`), so a flood of idle or
    slow strangers neither piles up threads nor keeps a subtask out. A peer that fails
    the handshake is counted and logged at a bounded rate. One that passed it holds
    the attempt's key: if it later sends a frame that fails its check or a malformed
    message, it loses its connection and is counted and logged each time (a bug of the
    job's own, rare). Nothing a peer sends reaches the handler unless it is a
    well-formed message.

    Authenticated connections are not capped: they are the job's subtasks, one each,
    plus those of a relaunched stage until their dead predecessors' connections close.
    A cap would have to be above the job's parallelism anyway, and could turn a
    relaunch away while the old connections linger; strangers never get that far.
    """

    def __init__(self, *, host: str, port: int, key: bytes,
                 handler: Callable[[RpcConnection, ToCoordinator], None],
                 handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 max_unauthenticated: int = MAX_UNAUTHENTICATED) -> None:
        self._sock = socket.create_server((host, port), reuse_port=False)
        self._key = key
        self._handler = handler
        self._handshake_timeout = handshake_timeout
        self.port: int = self._sock.getsockname()[1]
        self.host: str = self._sock.getsockname()[0]
        self._failed_handshakes = RateLimitedLog(
            logger=log, what="coordinator rejected a connection that failed the handshake")
        self.slots = HandshakeSlots(
            limit=max_unauthenticated,
            dropped=RateLimitedLog(logger=log, what="coordinator dropped a connection still "
                                   "in its handshake to make room"))
        self._broken = 0
        self._rejected_lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="coordinator-rpc")
        self._stopped = False
        self._thread.start()

    @property
    def rejected(self) -> int:
        """Connections closed for failing the handshake (dropped ones too) or, after it,
        for a frame or message that was not acceptable."""
        with self._rejected_lock:
            return self._failed_handshakes.total + self._broken

    def _reject(self, peer: object, reason: str) -> None:
        with self._rejected_lock:
            self._broken += 1
        log.warning("coordinator rejected a connection from %s: %s", peer, reason)

    def _accept(self) -> None:
        while not self._stopped:
            try:
                sock, peer = self._sock.accept()
            except OSError:
                return
            self.slots.admit(sock, peer=peer)
            threading.Thread(target=self._serve, args=(sock, peer), daemon=True,
                             name="coordinator-conn").start()

    def _serve(self, sock: socket.socket, peer: object) -> None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            session = server_handshake(sock, key=self._key, purpose=Purpose.CONTROL,
                                       timeout=self._handshake_timeout)
        except (HandshakeFailed, OSError) as exc:
            self._failed_handshakes.event(f"{peer}: {exc}")
            sock.close()
            return
        finally:
            self.slots.release(sock)
        conn = RpcConnection(sock=sock, session=session, decode=decode_to_coordinator)
        try:
            while True:
                message = conn.receive_raw()
                assert not isinstance(message, ToSubtask)
                self._handler(conn, message)
        except ConnectionLost:
            pass
        except (FrameRejected, MessageError) as exc:
            self._reject(peer, str(exc))
        finally:
            conn.close()

    def stop(self) -> None:
        self._stopped = True
        self._sock.close()


def connect(host: str, port: int, *, key: bytes, timeout: float = 30.0) -> SubtaskConnection:
    """Connect to the coordinator and authenticate; raises :class:`ConnectionLost`."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        session = client_handshake(sock, key=key, purpose=Purpose.CONTROL)
    except HandshakeFailed as exc:
        sock.close()
        raise ConnectionLost(f"cannot authenticate with the coordinator: {exc}") from exc
    sock.settimeout(None)
    return SubtaskConnection(sock=sock, session=session, decode=decode_to_subtask)
