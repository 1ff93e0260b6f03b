"""The active driver's beacon: a port whose connections close when the driver dies.

A standby driver connects and waits (:mod:`job_runtime.execution.driver.active_watch`). The
beacon greets each connection with the attempt it serves and says ``bye`` on every
orderly end of the driver: a job that finished or failed with an exit code is the
kubelet's to report, with that exit code. Nothing else is ever sent, so a connection
that closes without ``bye`` means the process is gone: the kernel closes the sockets
of a killed process at once, long before its container's end is noticed and reported
(see :mod:`cjob_spec.driver_beacon`).

A SIGTERM ends the driver at once, without ``bye`` (``job_runtime.cli``): it comes
from a deletion of the pod, which the operator sees for itself.

Whoever reaches the port may connect (the job's NetworkPolicy admits only the job's
own pods, where policies are enforced). A peer gains nothing but the attempt number:
what it sends is read and dropped, it is cut off once it sent more than a beacon ever
needs, and past :data:`MAX_WATCHERS` connections new ones are closed at once, without
a greeting, so no flood of connections can push out a standby that holds one. A peer
that vanished with its node is found by TCP keepalives and its place freed.
"""

from __future__ import annotations

import atexit
import selectors
import socket
import threading
import time

from cjob_spec.driver_beacon import BeaconAddress, BeaconMessage
from job_runtime.execution.driver.logger import log
from job_runtime.execution.driver.settings import DriverSettings

MAX_WATCHERS = 4
"""Connections held at once: one standby, with room for a restarted one."""
MAX_INBOUND_BYTES = 4096
"""What a peer may send before it is cut off: a standby sends nothing."""
SEND_TIMEOUT_SECONDS = 0.5
"""Longest wait to hand a greeting or a ``bye`` to a peer's socket."""
KEEPALIVE_IDLE_SECONDS = 5
KEEPALIVE_INTERVAL_SECONDS = 2
KEEPALIVE_PROBES = 3
"""A silent peer is probed after 5 s, and given up 6 s later: a vanished node's
connection is closed within about 11 s (both ends use these)."""


def keep_alive(conn: socket.socket) -> None:
    """Turn on TCP keepalives with :data:`KEEPALIVE_IDLE_SECONDS` and its companions."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_SECONDS),
                        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_SECONDS),
                        ("TCP_KEEPCNT", KEEPALIVE_PROBES)):
        option = getattr(socket, name, None)
        if option is not None:
            conn.setsockopt(socket.IPPROTO_TCP, option, value)


class DriverBeacon:
    """Listens at ``host`` (an ephemeral port) for the driver of ``attempt``.

    :meth:`close` is the orderly end: every connection gets ``bye`` first. A driver
    that dies without calling it closes them without one, which is the point.
    """

    def __init__(self, *, host: str, attempt: int) -> None:
        self.attempt = attempt
        family = socket.AF_INET6 if ":" in host else socket.AF_INET  # a pod IP either way
        self._listener = socket.create_server((host, 0), family=family,
                                              backlog=MAX_WATCHERS * 2)
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
        except OSError as exc:
            # One connection failed (aborted, or no descriptor left): the beacon serves
            # on; a short pause keeps a lasting shortage from spinning.
            log.warning("driver beacon: a connection failed: %s", exc)
            time.sleep(0.1)
            return
        with self._lock:
            full = len(self._peers) >= MAX_WATCHERS
        if full or not _send(peer, BeaconMessage(kind="hello", attempt=self.attempt).encode()):
            peer.close()
            return
        try:
            keep_alive(peer)
            peer.setblocking(False)
        except OSError:
            peer.close()
            return
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


def start_beacon(settings: DriverSettings) -> DriverBeacon | None:
    """Listen for standby drivers (``--beacon-host``) and record where, in the background.

    The beacon only makes a standby's takeover faster: if it cannot listen or be
    recorded, the job runs on and the kubelet's report of this driver's end is what a
    standby waits for, as without it. Its ``bye`` is said at the interpreter's exit,
    which every orderly end of the driver passes through and a killed one does not.
    """
    if settings.beacon_host is None:
        return None
    namespace, name = settings.store.configmap(setting="--beacon-host")
    try:
        beacon = DriverBeacon(host=settings.beacon_host, attempt=settings.attempt)
    except OSError as exc:
        log.warning("cannot listen for standby drivers at %s: %s; a standby then learns "
                    "of this driver's end from the kubelet", settings.beacon_host, exc)
        return None
    atexit.register(beacon.close)
    address = BeaconAddress(attempt=settings.attempt, host=beacon.host, port=beacon.port)

    def publish() -> None:
        from cjob_checkpoint.store.configmap_beacon import open_beacon_records

        try:
            open_beacon_records(namespace=namespace, store=name).publish(address)
        except Exception as exc:
            log.warning("cannot record this driver's beacon in configmap:%s/%s: %s",
                        namespace, name, exc)
            return
        log.info("standby drivers can watch this driver at %s:%d", address.host, address.port)

    threading.Thread(target=publish, name="beacon-publish", daemon=True).start()
    return beacon
