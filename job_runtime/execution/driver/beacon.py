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
own pods, where policies are enforced), so a standby proves it is one: it sends the
beacon's token, which only readers of the checkpoint ConfigMap know, as a line of its
own. A standby that did is held in a place of its own (up to :data:`MAX_STANDBYS`), so
no number of strangers can keep it out or push it out:

- a connection is greeted at once while fewer than :data:`MAX_WATCHERS` unproven ones
  are held (a standby of an earlier release sends no token; a stranger gains nothing
  but the attempt number);
- past them it waits, ungreeted, up to :data:`PROOF_SECONDS` for the token, and at most
  :data:`MAX_UNAUTHENTICATED` wait so: a newcomer past them drops the oldest, so a
  flood only shortens the strangers' own wait, while a standby, which sends its token
  the moment it connects, is in within a round trip.

What a peer sends past its token is read and dropped, and it is cut off once it sent
more than a beacon ever needs. Drops are counted and logged at a bounded rate. A peer
that vanished with its node is found by TCP keepalives and its place freed. One thread
serves every connection (a selector), and nothing a peer does blocks it for long.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import hmac
import secrets
import selectors
import socket
import threading
import time

from cjob_spec.driver_beacon import BeaconAddress, BeaconMessage
from job_runtime.execution.driver.driver_settings import DriverSettings
from job_runtime.execution.driver.logger import log
from job_runtime.network.admission import MAX_UNAUTHENTICATED
from job_runtime.rate_limited_log import RateLimitedLog

MAX_WATCHERS = 4
"""Connections greeted and held at once without a token: one standby of an earlier
release, with room for a restarted one. Strangers can fill these; the standbys that
proved themselves have places of their own."""
MAX_STANDBYS = 4
"""Connections held at once that sent the token: one standby, with room for restarted
ones whose earlier connections are not yet found gone."""
PROOF_SECONDS = 2.0
"""How long an ungreeted connection may take to send the token. A standby sends it as
it connects, and gives up on a beacon that did not greet it within its own
``CONNECT_TIMEOUT_SECONDS`` (2 s) anyway, to try again."""
TOKEN_BYTES = 16
"""Random bytes of a beacon's token (sent as 32 hexadecimal digits)."""
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


def token_line(token: str) -> bytes:
    """What a standby sends first: the token of the beacon's address, as a line."""
    return token.encode("ascii") + b"\n"


@dataclasses.dataclass(kw_only=True)
class _Peer:
    received: int = 0
    """Bytes read from it, in all."""
    first_line: bytes | None = b""
    """What came before its first newline; ``None`` once that line was judged."""
    greeted: bool = False
    proven: bool = False
    deadline: float = 0.0
    """Until when an ungreeted one may take to send the token."""


class DriverBeacon:
    """Listens at ``host`` (an ephemeral port) for the driver of ``attempt``.

    :attr:`token` is to be recorded with the address: a standby that sends it is let in
    ahead of strangers. :meth:`close` is the orderly end: every greeted connection gets
    ``bye`` first. A driver that dies without calling it closes them without one, which
    is the point.
    """

    def __init__(self, *, host: str, attempt: int,
                 max_unauthenticated: int = MAX_UNAUTHENTICATED,
                 proof_seconds: float = PROOF_SECONDS) -> None:
        self.attempt = attempt
        self.token = secrets.token_hex(TOKEN_BYTES)
        self._token_line = token_line(self.token)
        self._max_unauthenticated = max_unauthenticated
        self._proof_seconds = proof_seconds
        family = socket.AF_INET6 if ":" in host else socket.AF_INET  # a pod IP either way
        self._listener = socket.create_server((host, 0), family=family,
                                              backlog=max_unauthenticated)
        self._listener.setblocking(False)
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._peers: dict[socket.socket, _Peer] = {}
        self._waiting: collections.OrderedDict[socket.socket, _Peer] = (
            collections.OrderedDict())
        self.dropped = RateLimitedLog(logger=log, what="driver beacon dropped a connection "
                                      "that did not send its token in time or in order")
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="driver-beacon", daemon=True)
        self._thread.start()

    @property
    def watchers(self) -> int:
        """How many peers hold a greeted connection now."""
        with self._lock:
            return sum(1 for peer in self._peers.values() if peer.greeted)

    @property
    def standbys(self) -> int:
        """How many of them sent the token."""
        with self._lock:
            return sum(1 for peer in self._peers.values() if peer.proven)

    @property
    def waiting(self) -> int:
        """How many connections wait, ungreeted, for their token now."""
        with self._lock:
            return len(self._waiting)

    def close(self) -> None:
        """Say ``bye`` to every greeted peer and stop listening; later calls do nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake_writer.send(b"x")
        self._thread.join(timeout=5.0)
        bye = BeaconMessage(kind="bye", attempt=self.attempt).encode()
        with self._lock:
            peers = list(self._peers.items())
            self._peers.clear()
            self._waiting.clear()
        for conn, peer in peers:
            if peer.greeted:
                _send(conn, bye)
            conn.close()
        self._listener.close()
        self._wake_reader.close()
        self._wake_writer.close()

    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        selector.register(self._wake_reader, selectors.EVENT_READ)
        try:
            while True:
                for key, _ in selector.select(timeout=self._next_expiry()):
                    if key.fileobj is self._wake_reader:
                        return
                    if key.fileobj is self._listener:
                        self._accept(selector)
                    else:
                        conn = key.fileobj
                        assert isinstance(conn, socket.socket)
                        self._read(selector, conn)
                self._expire(selector)
        except OSError as exc:  # the listener itself failed: the beacon is gone
            log.warning("driver beacon stopped: %s", exc)
        finally:
            selector.close()

    def _next_expiry(self) -> float | None:
        with self._lock:
            if not self._waiting:
                return None
            oldest = next(iter(self._waiting.values()))
        return max(0.0, oldest.deadline - time.monotonic())

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        while True:
            with self._lock:
                if not self._waiting:
                    return
                conn, peer = next(iter(self._waiting.items()))
                if peer.deadline > now:
                    return
            self._drop(selector, conn, f"no token within {self._proof_seconds:g} s")

    def _accept(self, selector: selectors.BaseSelector) -> None:
        try:
            conn, address = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            # One connection failed (aborted, or no descriptor left): the beacon serves
            # on; a short pause keeps a lasting shortage from spinning.
            log.warning("driver beacon: a connection failed: %s", exc)
            time.sleep(0.1)
            return
        peer = _Peer()
        with self._lock:
            unproven = sum(1 for held in self._peers.values() if held.greeted and not held.proven)
            greet = unproven < MAX_WATCHERS
        if greet and not _send(conn, BeaconMessage(kind="hello", attempt=self.attempt).encode()):
            conn.close()
            return
        try:
            keep_alive(conn)
            conn.setblocking(False)
        except OSError:
            conn.close()
            return
        oldest: socket.socket | None = None
        with self._lock:
            self._peers[conn] = peer
            if greet:
                peer.greeted = True
            else:
                peer.deadline = time.monotonic() + self._proof_seconds
                self._waiting[conn] = peer
                if len(self._waiting) > self._max_unauthenticated:
                    oldest = next(iter(self._waiting))
        selector.register(conn, selectors.EVENT_READ)
        if oldest is not None:
            self._drop(selector, oldest, f"{address} came when {self._max_unauthenticated} "
                                         f"others waited for their token")

    def _read(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        try:
            data = conn.recv(MAX_INBOUND_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        with self._lock:
            peer = self._peers.get(conn)
        if peer is None:
            return
        peer.received += len(data)
        if not data or peer.received > MAX_INBOUND_BYTES:
            self._drop(selector, conn, None)
            return
        if peer.first_line is None:
            return  # judged already: the rest is read and dropped
        line, newline, _ = (peer.first_line + data).partition(b"\n")
        if not newline:
            if len(line) < len(self._token_line):
                peer.first_line = line
                return
            line = b""  # too long to be the token
        peer.first_line = None
        if hmac.compare_digest(line + b"\n", self._token_line):
            self._prove(selector, conn, peer)
        elif not peer.greeted:
            self._drop(selector, conn, "it sent something else than the token")

    def _prove(self, selector: selectors.BaseSelector, conn: socket.socket,
               peer: _Peer) -> None:
        with self._lock:
            full = sum(1 for held in self._peers.values() if held.proven) >= MAX_STANDBYS
        if full:
            self._drop(selector, conn, f"{MAX_STANDBYS} standbys are held already")
            return
        if not peer.greeted:
            greeted = _send(conn, BeaconMessage(kind="hello", attempt=self.attempt).encode())
            conn.setblocking(False)  # ``_send`` gave it a timeout
            if not greeted:
                self._drop(selector, conn, "its greeting could not be sent")
                return
        with self._lock:
            self._waiting.pop(conn, None)
            peer.greeted = peer.proven = True

    def _drop(self, selector: selectors.BaseSelector, conn: socket.socket,
              why: str | None) -> None:
        """Close ``conn``; ``why`` is counted and logged (``None``: it closed, or sent
        too much, which is its own doing)."""
        with self._lock:
            self._peers.pop(conn, None)
            self._waiting.pop(conn, None)
        try:
            selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()
        if why is not None:
            self.dropped.event(why)


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
    address = BeaconAddress(attempt=settings.attempt, host=beacon.host, port=beacon.port,
                            token=beacon.token)

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
