"""The active driver's beacon: a port whose connections close when the driver dies.

A standby driver connects and waits (:mod:`job_runtime.execution.driver_watch`). The
beacon greets each connection with the attempt it serves and says ``bye`` on every
orderly end of the driver: a job that finished or failed with an exit code is the
kubelet's to report, with that exit code. Nothing else is ever sent, so a connection
that closes without ``bye`` means the process is gone: the kernel closes the sockets
of a killed process at once, long before its container's end is noticed and reported
(see :mod:`cjob_spec.driver_beacon`).

Whoever reaches the port may connect (the job's NetworkPolicy admits only the job's
own pods, where policies are enforced). A peer gains nothing but the attempt number:
what it sends is read and dropped, it is cut off once it sent more than a beacon ever
needs, and past :data:`MAX_WATCHERS` connections new ones are closed at once, without
a greeting, so no flood of connections can push out the standby's.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading

from cjob_spec.driver_beacon import BeaconMessage

log = logging.getLogger("job_runtime.driver")

MAX_WATCHERS = 4
"""Connections held at once: one standby, with room for a restarted one."""
MAX_INBOUND_BYTES = 4096
"""What a peer may send before it is cut off: a standby sends nothing."""
SEND_TIMEOUT_SECONDS = 0.5
"""Longest wait to hand a greeting or a ``bye`` to a peer's socket."""


class DriverBeacon:
    """Listens at ``host`` (an ephemeral port) for the driver of ``attempt``.

    :meth:`close` is the orderly end: every connection gets ``bye`` first. A driver
    that dies without calling it closes them without one, which is the point.
    """

    def __init__(self, *, host: str, attempt: int) -> None:
        self.attempt = attempt
        self._listener = socket.create_server((host, 0), backlog=MAX_WATCHERS * 2)
        self._listener.setblocking(False)
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._peers: dict[socket.socket, int] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="driver-beacon", daemon=True)
        self._thread.start()

    @property
    def watchers(self) -> int:
        """How many peers hold a connection now."""
        with self._lock:
            return len(self._peers)

    def close(self) -> None:
        """Say ``bye`` to every peer and stop listening; later calls do nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake_writer.send(b"x")
        self._thread.join(timeout=5.0)
        bye = BeaconMessage(kind="bye", attempt=self.attempt).encode()
        with self._lock:
            peers = list(self._peers)
            self._peers.clear()
        for peer in peers:
            _send(peer, bye)
            peer.close()
        self._listener.close()
        self._wake_reader.close()
        self._wake_writer.close()

    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        selector.register(self._wake_reader, selectors.EVENT_READ)
        try:
            while True:
                for key, _ in selector.select():
                    if key.fileobj is self._wake_reader:
                        return
                    if key.fileobj is self._listener:
                        self._accept(selector)
                    else:
                        peer = key.fileobj
                        assert isinstance(peer, socket.socket)
                        self._read(selector, peer)
        except OSError as exc:  # the listener itself failed: the beacon is gone
            log.warning("driver beacon stopped: %s", exc)
        finally:
            selector.close()

    def _accept(self, selector: selectors.BaseSelector) -> None:
        try:
            peer, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        with self._lock:
            full = len(self._peers) >= MAX_WATCHERS
        if full or not _send(peer, BeaconMessage(kind="hello", attempt=self.attempt).encode()):
            peer.close()
            return
        peer.setblocking(False)
        with self._lock:
            self._peers[peer] = 0
        selector.register(peer, selectors.EVENT_READ)

    def _read(self, selector: selectors.BaseSelector, peer: socket.socket) -> None:
        try:
            data = peer.recv(MAX_INBOUND_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        with self._lock:
            received = self._peers.get(peer, 0) + len(data)
            keep = bool(data) and received <= MAX_INBOUND_BYTES
            if keep:
                self._peers[peer] = received
            else:
                self._peers.pop(peer, None)
        if not keep:
            selector.unregister(peer)
            peer.close()


def _send(peer: socket.socket, message: bytes) -> bool:
    try:
        peer.settimeout(SEND_TIMEOUT_SECONDS)
        peer.sendall(message)
        return True
    except OSError:
        return False
