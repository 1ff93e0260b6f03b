"""The coordinator's network endpoint, which can be opened before the coordinator exists.

A warm standby launches its barrier stage before it is promoted, so that a takeover
does not wait for Spark to schedule the stage and start the subtasks. Those subtasks
connect and register at once, but the coordinator that answers them needs the attempt
and the store, which only the promotion gives. The endpoint holds the registrations
until a coordinator attaches, then hands them over in the order they came.

Only registrations can come before the answer (a subtask sends nothing else until it
is registered), so nothing else is held. Of the registrations, only the newest stage
attempt's are kept: when Spark relaunches a parked stage, the older attempt's subtasks
are refused at once, as the coordinator would refuse them, and what is held stays
bounded by the parallelism.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from job_runtime.coordinator.messages import Register, Rejected, ToCoordinator
from job_runtime.coordinator.rpc import ConnectionLost, RpcConnection, RpcServer

log = logging.getLogger(__name__)

Handler = Callable[[RpcConnection, ToCoordinator], None]


class CoordinatorEndpoint:
    """An :class:`RpcServer` whose messages wait for a handler to be attached."""

    def __init__(self, *, host: str, key: bytes, port: int = 0) -> None:
        self._lock = threading.Condition()
        self._handler: Handler | None = None
        self._held: dict[int, tuple[RpcConnection, Register]] = {}
        self._held_epoch = -1
        self._server = RpcServer(host=host, port=port, key=key, handler=self._receive)
        self.host = self._server.host
        self.port = self._server.port

    @property
    def rejected(self) -> int:
        """Connections dropped for failing authentication or the protocol."""
        return self._server.rejected

    def attach(self, handler: Handler) -> None:
        """From now on every message goes to ``handler``, the held registrations first."""
        with self._lock:
            if self._handler is not None:
                raise RuntimeError("a coordinator is already attached to this endpoint")
            self._handler = handler
            held = sorted(self._held.items())
            self._held = {}
            self._lock.notify_all()
        for _, (conn, message) in held:
            handler(conn, message)

    def parked(self) -> int:
        """How many subtasks of the newest stage attempt wait for a coordinator."""
        with self._lock:
            return len(self._held)

    def wait_parked(self, count: int, *, timeout: float) -> bool:
        """Whether ``count`` subtasks are parked within ``timeout`` seconds."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self._held) >= count, timeout=timeout)

    def stop(self) -> None:
        self._server.stop()

    def _receive(self, conn: RpcConnection, message: ToCoordinator) -> None:
        with self._lock:
            handler = self._handler
            if handler is None:
                self._hold(conn, message)
                return
        handler(conn, message)

    def _hold(self, conn: RpcConnection, message: ToCoordinator) -> None:
        if not isinstance(message, Register):
            log.warning("a subtask sent %s before registering; ignored", message.TYPE)
            return
        if message.epoch < self._held_epoch:
            _refuse(conn, f"epoch {message.epoch} is over")
            return
        if message.epoch > self._held_epoch:
            for older, _ in self._held.values():
                _refuse(older, f"epoch {self._held_epoch} is over")
            self._held = {}
            self._held_epoch = message.epoch
        self._held[message.subtask] = (conn, message)
        self._lock.notify_all()


def _refuse(conn: RpcConnection, reason: str) -> None:
    try:
        conn.send(Rejected(reason=reason))
    except ConnectionLost:
        pass
