"""How a listener keeps strangers from using up its threads.

Every listener of a job attempt (the coordinator's RPC port, each subtask's channel
listener) is reachable from the cluster, and whoever connects gets a thread that
waits for the handshake. Two limits keep that bounded:

- the handshake has a deadline for the whole exchange
  (:data:`~job_runtime.network.handshake.HANDSHAKE_TIMEOUT`);
- at most :data:`MAX_UNAUTHENTICATED` connections may be in their handshake at once.
  When a newcomer finds them all taken, the *oldest* is dropped to make room rather
  than the newcomer refused: a genuine peer completes its handshake in milliseconds,
  so a flood of idle or slow strangers only shortens the strangers' own time, and
  never keeps one of the job's subtasks out.

Connections that completed the handshake proved they hold the attempt's key: they are
the job's own and are not limited here. Drops are counted and logged at most once a
:data:`~job_runtime.rate_limited_log.LOG_INTERVAL_SECONDS`, never a line per connection, which a flood would turn
into a flood of the log.
"""

from __future__ import annotations

import collections
import socket
import threading

from job_runtime.rate_limited_log import RateLimitedLog

MAX_UNAUTHENTICATED = 64
"""Connections a listener lets wait for their handshake at once.

A job's own peers connect all at once only when a stage starts: the coordinator
hears from every subtask, a subtask from each upstream one, and each of those
handshakes takes milliseconds. Sixty-four is far more than ever wait at the same
moment, and bounds a stranger's flood to 64 waiting threads per listener."""


class HandshakeSlots:
    """The connections of one listener that are still in their handshake.

    :meth:`admit` a connection when it is accepted and :meth:`release` it once its
    handshake ends, whichever way. Admitting one past ``limit`` shuts the oldest down
    (its handshake fails at once, in its own thread, which then releases it).
    """

    def __init__(self, *, limit: int = MAX_UNAUTHENTICATED, dropped: RateLimitedLog) -> None:
        if limit < 1:
            raise ValueError(f"a listener must let at least one connection in, not {limit}")
        self.limit = limit
        self._dropped = dropped
        self._lock = threading.Lock()
        self._waiting: collections.OrderedDict[socket.socket, object] = (
            collections.OrderedDict())

    @property
    def waiting(self) -> int:
        """How many connections are in their handshake now."""
        with self._lock:
            return len(self._waiting)

    @property
    def dropped(self) -> int:
        """How many connections were dropped to make room, in all."""
        return self._dropped.total

    def admit(self, sock: socket.socket, *, peer: object) -> None:
        """Count ``sock`` in; past the limit, the oldest waiting connection is dropped."""
        with self._lock:
            self._waiting[sock] = peer
            oldest = None
            if len(self._waiting) > self.limit:
                oldest, oldest_peer = self._waiting.popitem(last=False)
        if oldest is not None:
            _shut(oldest)
            self._dropped.event(f"{oldest_peer} was still in its handshake when "
                                f"{self.limit} others were")

    def release(self, sock: socket.socket) -> None:
        """``sock``'s handshake ended (done, failed, or dropped: then this does nothing)."""
        with self._lock:
            self._waiting.pop(sock, None)


def _shut(sock: socket.socket) -> None:
    """End a connection another thread may be reading: ``shutdown`` wakes its ``recv``;
    closing it is left to that thread, which still holds it."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
