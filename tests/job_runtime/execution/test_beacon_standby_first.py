"""Idle connections to the driver's beacon cannot keep its standby out.

The beacon greets a few connections without a token, as before; past them strangers
wait, ungreeted and for a short while, and a standby that sends the token recorded
with the beacon's address is let in ahead of them, and still hears of the driver's
death. The driver is a real process running the driver's own beacon wiring.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from cjob_spec.driver_beacon import BeaconAddress, BeaconMessage, DriverLost
from e2e.controlplane.waiting import wait_for
from job_runtime.execution.driver.active_watch import ActiveDriverWatch
from job_runtime.execution.driver.beacon import (
    MAX_WATCHERS,
    DriverBeacon,
    token_line,
)
from job_runtime.network.admission import MAX_UNAUTHENTICATED

DRIVER = textwrap.dedent("""
    import sys
    from job_runtime.execution.driver.beacon import start_beacon
    from job_runtime.execution.driver.driver_settings import DriverSettings
    from job_runtime.execution.driver.store import StoreAddress

    settings = DriverSettings(entrypoint="x:y", job_name="clicks", job_uid="u",
                              checkpoint_storage="file:///tmp/x", attempt=1,
                              store=StoreAddress.parse("configmap:jobs/clicks-checkpoints"),
                              beacon_host="127.0.0.1")
    beacon = start_beacon(settings)
    print(beacon.port, beacon.token, flush=True)
    sys.stdin.readline()
""")
IDLE = MAX_WATCHERS + MAX_UNAUTHENTICATED + 20
"""Idle connections: every place for unproven ones, and then some."""




@pytest.fixture
def driver() -> Iterator[tuple[subprocess.Popen[str], BeaconAddress]]:
    env = {**os.environ, "KUBECONFIG": "/nonexistent"}  # recording the address fails
    process = subprocess.Popen([sys.executable, "-c", DRIVER], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    assert process.stdout is not None
    port, token = process.stdout.readline().split()
    yield process, BeaconAddress(attempt=1, host="127.0.0.1", port=int(port), token=token)
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


def hold_idle(port: int, idle_sockets: list[socket.socket]) -> None:
    for _ in range(IDLE):
        idle_sockets.append(socket.create_connection(("127.0.0.1", port), timeout=5))


class TestAStandbyGetsInAheadOfIdleConnections:
    def test_a_standby_watches_and_reports_a_killed_driver_while_idle_peers_hold_the_beacon(
            self, driver: tuple[subprocess.Popen[str], BeaconAddress],
            idle_sockets: list[socket.socket]) -> None:
        process, address = driver
        hold_idle(address.port, idle_sockets)
        reports: list[DriverLost] = []
        watch = ActiveDriverWatch(pod="clicks-standby", report=reports.append)
        watch.start()
        try:
            watch.offer(address)
            wait_for(lambda: watch.holding == address, what="the standby to watch",
                     timeout=5, interval=0.05)
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
            (report,) = wait_for(lambda: reports, what="the loss report", timeout=10)
            assert report.attempt == 1
        finally:
            watch.stop()
            assert watch.join(timeout=5)

    def test_the_token_is_greeted_while_the_idle_connections_are_still_held(
            self, idle_sockets: list[socket.socket]) -> None:
        beacon = DriverBeacon(host="127.0.0.1", attempt=3, proof_seconds=30.0)
        try:
            hold_idle(beacon.port, idle_sockets)
            wait_for(lambda: beacon.watchers == MAX_WATCHERS
                     and beacon.waiting == MAX_UNAUTHENTICATED,
                     what="the idle connections to fill every place", timeout=10)
            with socket.create_connection(("127.0.0.1", beacon.port), timeout=5) as standby:
                standby.sendall(token_line(beacon.token))
                line = standby.recv(256)
                assert BeaconMessage.decode(line.strip()) == BeaconMessage(kind="hello",
                                                                           attempt=3)
                wait_for(lambda: beacon.standbys == 1, what="the standby to be held",
                         timeout=5, interval=0.05)
                assert beacon.watchers == MAX_WATCHERS + 1
        finally:
            beacon.close()


class TestStrangersPastTheGreetedFewWaitBriefly:
    def test_an_ungreeted_connection_without_the_token_is_closed_after_its_time(
            self, idle_sockets: list[socket.socket]) -> None:
        beacon = DriverBeacon(host="127.0.0.1", attempt=3, proof_seconds=0.5)
        try:
            for _ in range(MAX_WATCHERS + 1):
                idle_sockets.append(socket.create_connection(("127.0.0.1", beacon.port),
                                                        timeout=5))
            for greeted in idle_sockets[:MAX_WATCHERS]:
                assert greeted.recv(256).startswith(b"{")
            assert idle_sockets[-1].recv(256) == b""  # closed without a greeting
            assert beacon.waiting == 0
        finally:
            beacon.close()

    def test_a_wrong_token_is_not_let_in(self, idle_sockets: list[socket.socket]) -> None:
        beacon = DriverBeacon(host="127.0.0.1", attempt=3, proof_seconds=30.0)
        try:
            hold_idle(beacon.port, idle_sockets)
            with socket.create_connection(("127.0.0.1", beacon.port), timeout=5) as guesser:
                guesser.sendall(token_line("0" * len(beacon.token)))
                assert guesser.recv(256) == b""
            assert beacon.standbys == 0
        finally:
            beacon.close()
