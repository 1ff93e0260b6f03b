"""Messages between the coordinator (driver) and the subtasks (Spark tasks).

Each message is a ``(kind, fields)`` pair, pickled and length-prefixed on one TCP
connection per subtask. The coordinator's endpoint is its own, not Spark's: a
Spark barrier stage offers only collective calls, and a ``barrier()`` costs
about a second, far too much for a checkpoint every second.
"""

from __future__ import annotations

import pickle
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

_LENGTH = struct.Struct(">I")

Message = tuple[str, dict[str, Any]]


class ConnectionLost(Exception):
    """The other end of an RPC connection went away."""


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
    """One framed, thread-safe duplex connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()
        self.closed = False

    def send(self, kind: str, **fields: Any) -> None:
        data = pickle.dumps((kind, fields), protocol=pickle.HIGHEST_PROTOCOL)
        with self._send_lock:
            try:
                self.sock.sendall(_LENGTH.pack(len(data)) + data)
            except OSError as exc:
                raise ConnectionLost(str(exc)) from exc

    def receive(self) -> Message:
        try:
            (length,) = _LENGTH.unpack(_recv_exact(self.sock, _LENGTH.size))
            kind, fields = pickle.loads(_recv_exact(self.sock, length))
        except OSError as exc:
            raise ConnectionLost(str(exc)) from exc
        return str(kind), dict(fields)

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class RpcServer:
    """Accepts subtask connections and hands each message to ``handler``."""

    def __init__(self, *, host: str, port: int,
                 handler: Callable[[RpcConnection, str, dict[str, Any]], None],
                 on_disconnect: Callable[[RpcConnection], None]) -> None:
        self._sock = socket.create_server((host, port), reuse_port=False)
        self._handler = handler
        self._on_disconnect = on_disconnect
        self.port: int = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True, name="coordinator-rpc")
        self._stopped = False
        self._thread.start()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                sock, _ = self._sock.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = RpcConnection(sock)
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name="coordinator-conn").start()

    def _serve(self, conn: RpcConnection) -> None:
        try:
            while True:
                kind, fields = conn.receive()
                self._handler(conn, kind, fields)
        except ConnectionLost:
            pass
        finally:
            self._on_disconnect(conn)

    def stop(self) -> None:
        self._stopped = True
        self._sock.close()


def connect(host: str, port: int, *, timeout: float = 30.0) -> RpcConnection:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return RpcConnection(sock)
