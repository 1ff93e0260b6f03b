"""A standby's watch over the active driver: report it lost the moment it dies.

The standby hears where the active driver's beacon listens from the checkpoint
ConfigMap it watches for its promotion anyway, connects, and waits. A connection that
closes without ``bye`` is reported once, through ``report`` (the operator's channel:
an annotation on the same ConfigMap). See :mod:`cjob_spec.driver_beacon` for why a
false report is safe.

Only a connection that was greeted can be lost: an address that does not answer (an
earlier attempt's, whose pod is gone, or a driver still starting) is tried again
every :data:`RETRY_SECONDS` without a report, and until it answers the kubelet's
report stays the way that driver's end is noticed. The standby sends the token the
address carries as it connects: the beacon then greets it however many strangers
hold connections (:mod:`job_runtime.execution.driver.beacon`).
"""

from __future__ import annotations

import enum
import selectors
import socket
import threading
import time
from collections.abc import Callable

from cjob_spec.driver_beacon import (
    MAX_LINE_BYTES,
    BeaconAddress,
    BeaconMessage,
    BeaconSignalError,
    DriverLost,
)
from job_runtime.execution.driver.beacon import keep_alive, token_line
from job_runtime.execution.driver.logger import log

CONNECT_TIMEOUT_SECONDS = 2.0
"""Longest wait to connect to a beacon and be greeted."""
CHECK_SECONDS = 0.25
"""How often a held connection looks up for a stop or a newer beacon."""
RETRY_SECONDS = 2.0
"""Pause before an address that did not answer is tried again."""


class _Outcome(enum.Enum):
    UNREACHABLE = "unreachable"
    """No connection, or no greeting in time: tried again later."""
    NOT_A_BEACON = "not a beacon"
    """Something else answers there, or another attempt's beacon: not watched."""
    ENDED = "ended"
    """Said ``bye``, reported lost, or superseded by a newer address."""


class ActiveDriverWatch:
    """Holds a connection to the beacon of the newest attempt it was offered and calls
    ``report`` when it is lost; ``pod`` is the standby's own pod, named in reports."""

    def __init__(self, *, pod: str, report: Callable[[DriverLost], None]) -> None:
        self.pod = pod
        self._report = report
        self._offered: BeaconAddress | None = None
        self._changed = threading.Condition()
        self._stopped = False
        self._reported: set[int] = set()
        self.tried: BeaconAddress | None = None
        """The last address connected to (or tried)."""
        self.holding: BeaconAddress | None = None
        """The beacon whose connection is held now, once it greeted."""
        self.outcome: str | None = None
        """How the last connection went: unreachable, not a beacon, or ended."""
        self._thread = threading.Thread(target=self._run, name="driver-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the standby was promoted, or is ending). It returns at once:
        a promotion must not wait; the connection closes within :data:`CHECK_SECONDS`."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def join(self, *, timeout: float) -> bool:
        """Wait for the watch to end after :meth:`stop`; whether it did."""
        self._thread.join(timeout=timeout)
        return not self._thread.is_alive()

    def offer(self, address: BeaconAddress) -> None:
        """The beacon recorded now. Attempts only move forward: an address of an older
        attempt than one offered before is a stale record, not the active driver's."""
        with self._changed:
            offered = self._offered
            if offered is not None and address.attempt < offered.attempt:
                return
            if address != offered:
                self._offered = address
                self._changed.notify_all()

    @property
    def reported(self) -> frozenset[int]:
        """The attempts reported lost."""
        return frozenset(self._reported)

    def _run(self) -> None:
        tried: BeaconAddress | None = None
        retry = False
        while True:
            with self._changed:
                deadline = time.monotonic() + RETRY_SECONDS
                while not self._stopped and (
                        self._offered is None
                        or (self._offered == tried
                            and not (retry and time.monotonic() >= deadline))):
                    self._changed.wait(timeout=RETRY_SECONDS if retry else None)
                if self._stopped:
                    return
                address = self._offered
            assert address is not None
            quiet = address == tried  # a retry: its failure was said already
            tried = self.tried = address
            retry = False
            if address.attempt in self._reported:
                continue
            try:
                outcome = self._hold(address, quiet=quiet)
                self.outcome = outcome.value
                retry = outcome is _Outcome.UNREACHABLE
            except Exception:  # the watch is an optimisation: never let it die silently
                log.exception("standby: watching the driver of attempt %d failed; "
                              "its end is left to the kubelet's report", address.attempt)

    def _current(self) -> BeaconAddress | None:
        with self._changed:
            return None if self._stopped else self._offered

    def _hold(self, address: BeaconAddress, *, quiet: bool) -> _Outcome:
        """Connect to ``address`` and hold the connection until it ends; how it went."""
        try:
            conn = socket.create_connection((address.host, address.port),
                                            timeout=CONNECT_TIMEOUT_SECONDS)
        except OSError as exc:
            (log.debug if quiet else log.info)(
                "standby: the beacon of attempt %d at %s:%d does not answer (%s); trying "
                "again", address.attempt, address.host, address.port, exc)
            return _Outcome.UNREACHABLE
        with conn, _LineReader(conn) as reader:
            keep_alive(conn)
            try:
                if address.token is not None:  # lets it in ahead of any stranger
                    conn.sendall(token_line(address.token))
                hello = reader.next_message(timeout=CONNECT_TIMEOUT_SECONDS)
            except BeaconSignalError as exc:
                log.warning("standby: %s:%d is not the beacon of attempt %d: %s",
                            address.host, address.port, address.attempt, exc)
                return _Outcome.NOT_A_BEACON
            except (_NoMessageYet, OSError):
                return _Outcome.UNREACHABLE
            if hello is None:  # closed without a greeting: a beacon with no room left
                return _Outcome.UNREACHABLE
            if hello.kind != "hello" or hello.attempt != address.attempt:
                log.info("standby: %s:%d did not greet as attempt %d's beacon; not watched",
                         address.host, address.port, address.attempt)
                return _Outcome.NOT_A_BEACON
            log.info("standby: watching the driver of attempt %d (beacon %s:%d)",
                     address.attempt, address.host, address.port)
            self.holding = address
            try:
                self._wait_for_end(reader, address)
            finally:
                self.holding = None
            return _Outcome.ENDED

    def _wait_for_end(self, reader: _LineReader, address: BeaconAddress) -> None:
        while self._current() == address:
            try:
                message = reader.next_message(timeout=CHECK_SECONDS)
            except _NoMessageYet:
                continue
            except BeaconSignalError as exc:
                log.warning("standby: the beacon of attempt %d sent %s; not watched",
                            address.attempt, exc)
                return
            except OSError as exc:
                self._lost(address, f"its connection failed: {exc}")
                return
            if message is None:
                self._lost(address, "its connection closed without a goodbye")
                return
            if message.kind == "bye":
                log.info("standby: the driver of attempt %d is ending in order",
                         address.attempt)
                return

    def _lost(self, address: BeaconAddress, how: str) -> None:
        if self._current() is None:
            return  # stopped meanwhile: promoted, or ending; nothing to tell
        self._reported.add(address.attempt)
        report = DriverLost(attempt=address.attempt, pod=self.pod, at=time.time(),
                            detail=f"the driver of attempt {address.attempt} is gone: {how}")
        log.warning("standby: %s; reporting it", report.detail)
        try:
            self._report(report)
        except Exception as exc:  # the kubelet's report still comes, only later
            log.warning("standby: could not report the driver of attempt %d lost: %s",
                        address.attempt, exc)


class _NoMessageYet(Exception):
    """No whole line arrived within the wait; the connection is fine."""


class _LineReader:
    """Beacon messages, one JSON line each, from a socket."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.buffer = b""
        self.selector = selectors.DefaultSelector()  # any descriptor number, unlike select()
        self.selector.register(conn, selectors.EVENT_READ)

    def __enter__(self) -> _LineReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.selector.close()

    def next_message(self, *, timeout: float) -> BeaconMessage | None:
        """The next message; ``None`` once the peer closed; :class:`_NoMessageYet`
        meanwhile. A failed connection raises its ``OSError``, a keepalive timeout too
        (``TimeoutError``): that is why no message yet is an exception of its own."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_LINE_BYTES:
                raise BeaconSignalError(f"a line longer than {MAX_LINE_BYTES} bytes")
            left = deadline - time.monotonic()
            if left <= 0 or not self.selector.select(timeout=left):
                raise _NoMessageYet
            data = self.conn.recv(MAX_LINE_BYTES)
            if not data:
                return None
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return BeaconMessage.decode(line)
