"""A standby's watch over the active driver: report it lost the moment it dies.

The standby hears where the active driver's beacon listens from the checkpoint
ConfigMap it watches for its promotion anyway, connects, and waits. A connection that
closes without ``bye`` is reported once, through ``report`` (the operator's channel:
an annotation on the standby's own pod). See :mod:`cjob_spec.driver_beacon` for why a
false report is safe.

Only a connection that was greeted can be lost: an address that does not answer (an
earlier attempt's, whose pod is gone) is passed over without a report, and the
kubelet's own report stays the way such a driver's end is noticed.
"""

from __future__ import annotations

import logging
import select
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

log = logging.getLogger("job_runtime.driver")

CONNECT_TIMEOUT_SECONDS = 2.0
"""Longest wait to connect to a beacon and be greeted."""
CHECK_SECONDS = 0.25
"""How often a held connection looks up for a stop or a newer beacon."""


class ActiveDriverWatch:
    """Holds a connection to the beacon of the newest attempt before ``attempt`` (the
    attempt this standby would take) and calls ``report`` when it is lost."""

    def __init__(self, *, attempt: int, report: Callable[[DriverLost], None]) -> None:
        self.attempt = attempt
        self._report = report
        self._offered: BeaconAddress | None = None
        self._changed = threading.Condition()
        self._stopped = False
        self._reported: set[int] = set()
        self.tried: BeaconAddress | None = None
        """The last address connected to (or tried)."""
        self.holding: BeaconAddress | None = None
        """The beacon whose connection is held now, once it greeted."""
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
        """The beacon recorded now. Attempts only move forward: one of this standby's
        attempt or later, or older than one offered before, is not the active driver's."""
        if address.attempt >= self.attempt:
            return
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
        while True:
            with self._changed:
                while not self._stopped and (self._offered is None or self._offered == tried):
                    self._changed.wait()
                if self._stopped:
                    return
                address = self._offered
            assert address is not None
            tried = self.tried = address
            if address.attempt not in self._reported:
                self._hold(address)

    def _current(self) -> BeaconAddress | None:
        with self._changed:
            return None if self._stopped else self._offered

    def _hold(self, address: BeaconAddress) -> None:
        """Connect to ``address``, wait until it closes, and say whether that was a loss."""
        try:
            conn = socket.create_connection((address.host, address.port),
                                            timeout=CONNECT_TIMEOUT_SECONDS)
        except OSError as exc:
            log.info("standby: the beacon of attempt %d at %s:%d does not answer (%s)",
                     address.attempt, address.host, address.port, exc)
            return
        with conn:
            reader = _LineReader(conn)
            try:
                hello = reader.next_message(timeout=CONNECT_TIMEOUT_SECONDS)
            except (OSError, BeaconSignalError) as exc:
                log.warning("standby: %s:%d is not the beacon of attempt %d: %s",
                            address.host, address.port, address.attempt, exc)
                return
            if hello is None or hello.kind != "hello" or hello.attempt != address.attempt:
                log.info("standby: %s:%d did not greet as attempt %d's beacon; not watched",
                         address.host, address.port, address.attempt)
                return
            log.info("standby: watching the driver of attempt %d (beacon %s:%d)",
                     address.attempt, address.host, address.port)
            self.holding = address
            try:
                self._wait_for_end(reader, address)
            finally:
                self.holding = None

    def _wait_for_end(self, reader: _LineReader, address: BeaconAddress) -> None:
        while self._current() == address:
            try:
                message = reader.next_message(timeout=CHECK_SECONDS)
            except TimeoutError:
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
        self._reported.add(address.attempt)
        report = DriverLost(attempt=address.attempt, at=time.time(),
                            detail=f"the driver of attempt {address.attempt} is gone: {how}")
        log.warning("standby: %s; reporting it", report.detail)
        try:
            self._report(report)
        except Exception as exc:  # the kubelet's report still comes, only later
            log.warning("standby: could not report the driver of attempt %d lost: %s",
                        address.attempt, exc)


class _LineReader:
    """Beacon messages, one JSON line each, from a socket."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.buffer = b""

    def next_message(self, *, timeout: float) -> BeaconMessage | None:
        """The next message; ``None`` once the peer closed; TimeoutError meanwhile."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_LINE_BYTES:
                raise BeaconSignalError(f"a line longer than {MAX_LINE_BYTES} bytes")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no message yet")
            readable, _, _ = select.select([self.conn], [], [], left)
            if not readable:
                raise TimeoutError("no message yet")
            data = self.conn.recv(MAX_LINE_BYTES)
            if not data:
                return None
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return BeaconMessage.decode(line)
