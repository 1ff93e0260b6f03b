"""A standby hears that the active driver died the moment it dies, and only then.

The active driver is a real process running the driver's own beacon wiring
(``start_beacon``, as ``--beacon-host`` starts it); the standby's side is the
:class:`ActiveDriverWatch` it runs while it waits for its promotion. A kill must be
reported; an orderly end (a finished or failed job, which the kubelet reports with its
exit code) must not; hostile peers must not silence the beacon or fake a loss.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from cjob_spec.driver_beacon import BeaconAddress, BeaconMessage, DriverLost
from e2e.controlplane.waiting import wait_for
from job_runtime.execution.driver.active_watch import ActiveDriverWatch
from job_runtime.execution.driver.beacon import MAX_INBOUND_BYTES, MAX_WATCHERS, DriverBeacon

DRIVER = textwrap.dedent("""
    import sys, time
    from job_runtime.execution.driver.beacon import start_beacon
    from job_runtime.execution.driver.driver_settings import DriverSettings
    from job_runtime.execution.driver.store import StoreAddress

    settings = DriverSettings(entrypoint="x:y", job_name="clicks", job_uid="u",
                              checkpoint_storage="file:///tmp/x", attempt=int(sys.argv[1]),
                              store=StoreAddress.parse("configmap:jobs/clicks-checkpoints"),
                              beacon_host="127.0.0.1")
    beacon = start_beacon(settings)
    print(beacon.port, flush=True)
    # Waits for one line; "exit N" ends the driver with exit code N, in order.
    command = sys.stdin.readline().split()
    sys.exit(int(command[1]))
""")


class ActiveDriver:
    """A driver process with its beacon listening."""

    def __init__(self, *, attempt: int) -> None:
        env = {**os.environ, "KUBECONFIG": "/nonexistent"}  # recording the address fails
        self.process = subprocess.Popen([sys.executable, "-c", DRIVER, str(attempt)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=env)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.strip().isdigit(), self.process.stderr.read() if self.process.stderr else ""
        self.address = BeaconAddress(attempt=attempt, host="127.0.0.1", port=int(line))

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def exit(self, code: int) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"exit {code}\n")
        self.process.stdin.flush()
        assert self.process.wait(timeout=10) == code

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill()


@pytest.fixture
def drivers() -> Iterator[list[ActiveDriver]]:
    started: list[ActiveDriver] = []
    yield started
    for driver in started:
        driver.stop()


def start_driver(drivers: list[ActiveDriver], *, attempt: int) -> ActiveDriver:
    driver = ActiveDriver(attempt=attempt)
    drivers.append(driver)
    return driver


class Standby:
    """The standby's watch, with the reports it made."""

    def __init__(self, *, attempt: int) -> None:
        self.reports: list[DriverLost] = []
        self.watch = ActiveDriverWatch(pod=f"clicks-standby-{attempt - 1}",
                                       report=self.reports.append)
        self.watch.start()

    def watching(self, attempt: int) -> bool:
        return self.watch.holding is not None and self.watch.holding.attempt == attempt

    def stop(self) -> None:
        self.watch.stop()
        assert self.watch.join(timeout=5)


@pytest.fixture
def standbys() -> Iterator[list[Standby]]:
    started: list[Standby] = []
    yield started
    for standby in started:
        standby.stop()


def start_standby(standbys: list[Standby], *, attempt: int) -> Standby:
    standby = Standby(attempt=attempt)
    standbys.append(standby)
    return standby


# --- what is reported --------------------------------------------------------------------


def test_a_killed_driver_is_reported_lost_with_its_attempt(
        drivers: list[ActiveDriver], standbys: list[Standby]) -> None:
    driver = start_driver(drivers, attempt=3)
    standby = start_standby(standbys, attempt=4)
    standby.watch.offer(driver.address)
    wait_for(lambda: standby.watching(3), what="the standby to watch attempt 3", timeout=10)
    killed_at = time.time()
    driver.kill()
    (report,) = wait_for(lambda: standby.reports, what="the loss report", timeout=10)
    assert report.attempt == 3
    assert report.pod == "clicks-standby-3"
    assert report.at >= killed_at - 1
    assert "without a goodbye" in report.detail


def test_a_driver_ending_in_order_is_not_reported(
        drivers: list[ActiveDriver], standbys: list[Standby]) -> None:
    # A finished job, or one failing with an exit code: the kubelet reports it, with
    # the exit code that decides whether it is restarted at all.
    for code in (0, 3, 1):
        driver = start_driver(drivers, attempt=1)
        standby = start_standby(standbys, attempt=2)
        standby.watch.offer(driver.address)
        wait_for(lambda s=standby: s.watching(1), what="the standby to watch", timeout=10)
        driver.exit(code)
        wait_for(lambda s=standby: s.watch.holding is None, what="the watch to let go",
                 timeout=10)
        assert standby.reports == [], code


def test_each_attempt_is_reported_once_and_a_newer_beacon_is_watched_next(
        drivers: list[ActiveDriver], standbys: list[Standby]) -> None:
    first = start_driver(drivers, attempt=1)
    standby = start_standby(standbys, attempt=5)
    standby.watch.offer(first.address)
    wait_for(lambda: standby.watching(1), what="the standby to watch attempt 1", timeout=10)
    first.kill()
    wait_for(lambda: standby.reports, what="the loss report", timeout=10)
    standby.watch.offer(first.address)  # the same record, seen again on the next event
    second = start_driver(drivers, attempt=2)
    standby.watch.offer(second.address)
    wait_for(lambda: standby.watching(2), what="the standby to watch attempt 2", timeout=10)
    second.kill()
    wait_for(lambda: len(standby.reports) == 2, what="the second report", timeout=10)
    assert [report.attempt for report in standby.reports] == [1, 2]


def test_an_address_of_an_older_attempt_than_one_offered_is_a_stale_record(
        drivers: list[ActiveDriver], standbys: list[Standby]) -> None:
    driver = start_driver(drivers, attempt=2)
    standby = start_standby(standbys, attempt=4)
    standby.watch.offer(driver.address)
    standby.watch.offer(BeaconAddress(attempt=1, host="127.0.0.1", port=1))
    wait_for(lambda: standby.watching(2), what="the standby to watch attempt 2", timeout=10)
    time.sleep(0.3)
    assert standby.watching(2)


def test_a_standby_kept_past_its_attempt_watches_the_next_driver(
        drivers: list[ActiveDriver], standbys: list[Standby]) -> None:
    # Started during attempt 1 but not ready when it ended: attempt 2 got a new driver,
    # and this standby stays for it.
    standby = start_standby(standbys, attempt=2)
    driver = start_driver(drivers, attempt=2)
    standby.watch.offer(driver.address)
    wait_for(lambda: standby.watching(2), what="the standby to watch attempt 2", timeout=10)
    driver.kill()
    (report,) = wait_for(lambda: standby.reports, what="the loss report", timeout=10)
    assert report.attempt == 2


# --- addresses that are not the driver's ----------------------------------------------------


def test_an_address_that_does_not_answer_is_passed_over_without_a_report(
        drivers: list[ActiveDriver], standbys: list[Standby]) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    standby = start_standby(standbys, attempt=3)
    standby.watch.offer(BeaconAddress(attempt=1, host="127.0.0.1", port=port))
    driver = start_driver(drivers, attempt=2)
    time.sleep(0.3)
    standby.watch.offer(driver.address)
    wait_for(lambda: standby.watching(2), what="the standby to watch attempt 2", timeout=10)
    assert standby.reports == []


def test_a_beacon_greeting_as_another_attempt_is_not_watched(
        drivers: list[ActiveDriver], standbys: list[Standby]) -> None:
    # A recycled address: a driver of another attempt now listens there.
    driver = start_driver(drivers, attempt=2)
    standby = start_standby(standbys, attempt=4)
    standby.watch.offer(BeaconAddress(attempt=3, host="127.0.0.1", port=driver.address.port))
    wait_for(lambda: standby.watch.outcome == "not a beacon",
             what="the standby to find it is not attempt 3's beacon", timeout=10)
    driver.kill()
    time.sleep(0.5)
    assert standby.reports == [] and standby.watch.holding is None


@contextlib.contextmanager
def offered_peer(standbys: list[Standby], *,
                 attempt: int) -> Iterator[tuple[Standby, socket.socket]]:
    """A standby of the next attempt, offered a hand-made listener on loopback as the
    beacon of ``attempt``, and the connection it made there."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        standby = start_standby(standbys, attempt=attempt + 1)
        standby.watch.offer(BeaconAddress(attempt=attempt, host="127.0.0.1",
                                          port=listener.getsockname()[1]))
        peer, _ = listener.accept()
        with peer:
            yield standby, peer


def test_a_peer_that_is_no_beacon_is_not_watched_and_never_reported(
        standbys: list[Standby]) -> None:
    with offered_peer(standbys, attempt=1) as (standby, peer):
        peer.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        peer.close()
        wait_for(lambda: standby.watch.outcome == "not a beacon",
                 what="the standby to give up on it", timeout=10)
    assert standby.reports == []


# --- hostile peers at the beacon -------------------------------------------------------------


def test_a_flood_of_connections_cannot_push_out_the_standby(
        drivers: list[ActiveDriver], standbys: list[Standby]) -> None:
    driver = start_driver(drivers, attempt=1)
    standby = start_standby(standbys, attempt=2)
    standby.watch.offer(driver.address)
    wait_for(lambda: standby.watching(1), what="the standby to watch", timeout=10)
    flood = [socket.create_connection(("127.0.0.1", driver.address.port), timeout=5)
             for _ in range(MAX_WATCHERS * 3)]
    try:
        greeted = sum(1 for conn in flood if conn.recv(256).startswith(b"{"))
        assert greeted == MAX_WATCHERS - 1  # the rest are closed without a greeting
        driver.kill()
        (report,) = wait_for(lambda: standby.reports, what="the loss report", timeout=10)
        assert report.attempt == 1
    finally:
        for conn in flood:
            conn.close()


def test_a_standby_turned_away_by_a_full_beacon_tries_again_until_it_has_room(
        standbys: list[Standby]) -> None:
    beacon = DriverBeacon(host="127.0.0.1", attempt=1)
    squatters = [socket.create_connection(("127.0.0.1", beacon.port), timeout=5)
                 for _ in range(MAX_WATCHERS)]
    try:
        for conn in squatters:
            assert conn.recv(256).startswith(b"{")
        standby = start_standby(standbys, attempt=2)
        standby.watch.offer(BeaconAddress(attempt=1, host="127.0.0.1", port=beacon.port))
        wait_for(lambda: standby.watch.outcome == "unreachable", what="a refusal", timeout=10)
        squatters.pop().close()
        wait_for(lambda: standby.watching(1), what="the standby to get in", timeout=15)
        assert standby.reports == []
    finally:
        for conn in squatters:
            conn.close()
        beacon.close()


def test_a_peer_sending_more_than_a_beacon_needs_is_cut_off_and_the_beacon_serves_on() -> None:
    beacon = DriverBeacon(host="127.0.0.1", attempt=7)
    try:
        noisy = socket.create_connection(("127.0.0.1", beacon.port), timeout=5)
        assert BeaconMessage.decode(noisy.recv(256).strip()) == BeaconMessage(kind="hello",
                                                                            attempt=7)
        try:
            for _ in range(4):
                noisy.sendall(b"x" * MAX_INBOUND_BYTES)
        except OSError:
            pass  # already cut off
        wait_for(lambda: beacon.watchers == 0, what="the noisy peer to be cut off", timeout=10)
        for _ in range(MAX_WATCHERS):  # its slot is free again
            conn = socket.create_connection(("127.0.0.1", beacon.port), timeout=5)
            assert conn.recv(256).startswith(b"{")
            conn.close()
        noisy.close()
    finally:
        beacon.close()


def test_closing_the_beacon_says_goodbye_to_every_peer() -> None:
    beacon = DriverBeacon(host="127.0.0.1", attempt=2)
    peers = [socket.create_connection(("127.0.0.1", beacon.port), timeout=5) for _ in range(2)]
    for peer in peers:
        assert peer.recv(256).startswith(b"{")
    wait_for(lambda: beacon.watchers == 2, what="both peers to be held", timeout=10)
    beacon.close()
    beacon.close()  # a second close does nothing
    for peer in peers:
        data = b""
        while chunk := peer.recv(256):
            data += chunk
        assert BeaconMessage.decode(data.strip()) == BeaconMessage(kind="bye", attempt=2)
        peer.close()


# --- addresses and failures of the network ------------------------------------------------


def ipv6_loopback() -> bool:
    try:
        with socket.create_server(("::1", 0), family=socket.AF_INET6):
            return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="this host has no IPv6 loopback")
def test_a_driver_on_an_ipv6_pod_address_has_a_beacon_too(standbys: list[Standby]) -> None:
    # A pod IP of an IPv6-only cluster, as the operator passes it in --beacon-host.
    beacon = DriverBeacon(host="::1", attempt=2)
    try:
        standby = start_standby(standbys, attempt=3)
        standby.watch.offer(BeaconAddress(attempt=2, host="::1", port=beacon.port))
        wait_for(lambda: standby.watching(2), what="the standby to watch attempt 2", timeout=10)
    finally:
        beacon.close()
    wait_for(lambda: standby.watch.outcome == "ended", what="the goodbye", timeout=10)
    assert standby.reports == []


class GivenUpByTheKernel(socket.socket):
    """A connection whose keepalive probes went unanswered (its peer's node is gone):
    the kernel marks it readable and fails the read with ETIMEDOUT."""

    greeted = False

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if not self.greeted:
            self.greeted = True
            return super().recv(bufsize, flags)
        raise TimeoutError(errno.ETIMEDOUT, os.strerror(errno.ETIMEDOUT))


def test_a_driver_whose_keepalives_go_unanswered_is_reported_lost(
        standbys: list[Standby], monkeypatch: pytest.MonkeyPatch) -> None:
    from job_runtime.execution.driver import active_watch

    create_connection = socket.create_connection

    def connect(address: tuple[str, int], timeout: float) -> socket.socket:
        real = create_connection(address, timeout=timeout)
        return GivenUpByTheKernel(fileno=real.detach())

    monkeypatch.setattr(active_watch.socket, "create_connection", connect)
    with offered_peer(standbys, attempt=3) as (standby, peer):
        peer.sendall(BeaconMessage(kind="hello", attempt=3).encode())
        wait_for(lambda: standby.watching(3), what="the standby to watch", timeout=10)
        peer.sendall(b"{")  # now readable, as a connection the kernel gave up on is
        (report,) = wait_for(lambda: standby.reports, what="the loss report", timeout=10)
    assert report.attempt == 3
    assert "its connection failed" in report.detail and "timed out" in report.detail
