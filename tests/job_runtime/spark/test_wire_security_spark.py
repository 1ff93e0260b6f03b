"""A hostile peer on the network of a running job, on real Spark in local mode.

The peer finds every TCP port the job's Python processes listen on (the
coordinator in the driver, its metrics port, the channel listeners in the
subtasks) and sends each of them a pickle whose unpickling would create a marker
file, framed as a coordinator message and as a channel greeting; or it floods them
with connections that say nothing, or a byte now and then. None of it may be
unpickled, each connection must be closed, the job must keep checkpointing, and it
must still end with exactly-once output.
"""

from __future__ import annotations

import os
import pickle
import resource
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_harness import JobHarness

from job_runtime.execution.driver.spark_start import WORKER_DAEMON
from job_runtime.network.handshake import MAGIC, VERSION, Purpose

COUNT = 6000
RATE = 1000
WAIT = 30.0


class CreatesMarker:
    """Unpickling this runs ``open(path, "w")``: proof that a payload was unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (self.path, "w")


def test_a_hostile_peer_cannot_run_code_in_the_driver_or_the_subtasks_and_the_job_completes(
        harness: JobHarness) -> None:
    marker = harness.base / "unpickled-by-the-job"
    proc = harness.start(entrypoint="crashing_jobs:running_sum",
                         args={"count": COUNT, "rate": RATE, "output": str(harness.output)})
    try:
        harness.wait_status(1, lambda s: s["checkpoints"]["completed"] >= 1, proc=proc,
                            what="a first checkpoint completes")
        driver_ports = listening_sockets(python_processes(session=proc.pid, driver=proc.pid,
                                                          workers=False))
        worker_ports = listening_sockets(python_processes(session=proc.pid, driver=proc.pid,
                                                          workers=True))
        assert len(driver_ports) >= 1, "the coordinator's port was not found"
        assert len(worker_ports) >= 2, "the subtasks' channel listeners were not found"

        payload = pickle.dumps(CreatesMarker(marker))
        as_rpc = struct.pack(">I", len(payload)) + payload
        as_channel_hello = struct.pack(">BIq", 7, len(payload), 0) + payload
        outcomes = {(address, n): outcome_of_sending(address, attack)
                    for address in driver_ports + worker_ports
                    for n, attack in enumerate((as_rpc, as_channel_hello))}
        finished = harness.finish(proc, attempt=1)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not marker.exists(), "a process of the job unpickled what a stranger sent"
    # Each listener closed the hostile connection, and is still there.
    assert set(outcomes.values()) == {"closed"}, outcomes
    # Local mode: nothing of the job may listen beyond the loopback interface.
    assert {host for host, _ in driver_ports + worker_ports} == {"127.0.0.1"}
    assert finished.returncode == 0, finished.explain()
    assert finished.status is not None and finished.status["state"] == "finished"
    assert harness.running_sum_problems(count=COUNT) == []
    assert "rejected a connection" in finished.output


FLOOD_COUNT = COUNT * 4
"""Records of the flooded job: it runs long enough to be found, probed and flooded."""
IDLE_PER_LISTENER = 400
SLOW_PER_LISTENER = 8
FLOOD_CHECKPOINTS = 5
"""Checkpoints that must complete while the flood holds its connections open."""


@pytest.fixture
def many_sockets() -> Iterator[list[socket.socket]]:
    """Room for thousands of sockets in this process; every one closed afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 16384)), hard))
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_flood_of_idle_and_slow_connections_neither_stalls_checkpoints_nor_the_output(
        harness: JobHarness, many_sockets: list[socket.socket]) -> None:
    proc = harness.start(entrypoint="crashing_jobs:running_sum",
                         args={"count": FLOOD_COUNT, "rate": RATE, "output": str(harness.output)})
    stop = threading.Event()
    try:
        harness.wait_status(1, lambda s: s["checkpoints"]["completed"] >= 1, proc=proc,
                            what="a first checkpoint completes")
        found = (listening_sockets(python_processes(session=proc.pid, driver=proc.pid,
                                                    workers=False))
                 + listening_sockets(python_processes(session=proc.pid, driver=proc.pid,
                                                      workers=True)))
        listeners = [address for address in found if is_the_jobs(address)]
        assert len(listeners) >= 3, (listeners, found)
        for address in listeners:
            many_sockets.extend(connect_many(address, IDLE_PER_LISTENER))
        slow = [sock for address in listeners for sock in connect_many(address, SLOW_PER_LISTENER)]
        many_sockets.extend(slow)
        dribbler = threading.Thread(target=dribble, args=(slow, stop), daemon=True)
        dribbler.start()
        connected = len(many_sockets)
        before = harness.read_status(1) or {}
        done_before = before.get("checkpoints", {}).get("completed", 0)
        harness.wait_status(
            1, lambda s: s["checkpoints"]["completed"] >= done_before + FLOOD_CHECKPOINTS,
            proc=proc, what=f"{FLOOD_CHECKPOINTS} checkpoints complete under the flood")
        finished = harness.finish(proc, attempt=1)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
    assert connected >= len(listeners) * IDLE_PER_LISTENER // 2, "the flood reached the listeners"
    assert finished.returncode == 0, finished.explain()
    assert finished.status is not None and finished.status["state"] == "finished"
    assert harness.running_sum_problems(count=FLOOD_COUNT) == []


def is_the_jobs(address: tuple[str, int]) -> bool:
    """Whether the job's own code listens at ``address``: the coordinator and the
    channels answer a handshake's greeting with their nonce and proof, the metrics
    port answers HTTP. PySpark's own loopback listeners in the same processes (the
    accumulator server) answer neither; they are not the job's to defend."""
    probes = [(MAGIC + bytes([VERSION, purpose]) + bytes(32), 64) for purpose in Purpose]
    probes.append((b"GET /metrics HTTP/1.0\r\n\r\n", 8))
    for probe, size in probes:
        try:
            with socket.create_connection(address, timeout=1) as sock:
                sock.sendall(probe)
                reply = b""
                while len(reply) < size and (chunk := sock.recv(size - len(reply))):
                    reply += chunk
        except OSError:
            continue
        if len(reply) == size and (size == 64 or reply.startswith(b"HTTP/1.")):
            return True
    return False


def connect_many(address: tuple[str, int], count: int) -> list[socket.socket]:
    """Up to ``count`` connections to ``address`` that send nothing (fewer if the
    listener's backlog refuses some: a flood does not wait)."""
    opened = []
    for _ in range(count):
        try:
            opened.append(socket.create_connection(address, timeout=2))
        except OSError:
            continue
    return opened


def dribble(socks: list[socket.socket], stop: threading.Event) -> None:
    """One byte on each connection every two seconds: a handshake that never ends."""
    while not stop.wait(2.0):
        for sock in socks:
            try:
                sock.send(b"\x00")
            except OSError:
                continue


def outcome_of_sending(address: tuple[str, int], data: bytes) -> str:
    """Send ``data``: "closed" when the listener then closes the connection (EOF or
    reset), "open" when it keeps it open, "refused" when nothing listens any more."""
    try:
        sock = socket.create_connection(address, timeout=WAIT)
    except ConnectionRefusedError:
        return "refused"
    with sock:
        try:
            sock.sendall(data)
            while sock.recv(4096):
                pass
        except ConnectionResetError:
            pass
        except TimeoutError:
            return "open"
    return "closed"


# --------------------------------------------------------------------------- /proc


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of ``pid``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[3])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def python_processes(*, session: int, driver: int, workers: bool) -> list[int]:
    """The driver process, or the Python workers that run subtasks (children of the
    Python worker daemon, the runtime's own or PySpark's; the daemon's own socket
    serves the JVM and is left alone)."""
    if not workers:
        return [driver]
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _stat(int(entry))
        if stat is None or stat[1] != session:
            continue
        parent, _ = stat
        if _is_daemon(_cmdline(int(entry))) and _is_daemon(_cmdline(parent)):
            found.append(int(entry))
    return found


def _is_daemon(cmdline: str) -> bool:
    """A Python worker daemon, or a worker forked from one (it keeps the daemon's
    command line). Matched on ``-m <module>``: the JVM's own command line names the
    daemon module too, in its configuration."""
    return f"-m {WORKER_DAEMON}" in cmdline or "-m pyspark.daemon" in cmdline


def listening_sockets(pids: list[int]) -> list[tuple[str, int]]:
    """The IPv4 TCP addresses the processes ``pids`` listen on."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state != "0A" or inode not in inodes:  # 0A: LISTEN
            continue
        hex_ip, hex_port = local.split(":")
        ip = ".".join(str(b) for b in reversed(bytes.fromhex(hex_ip)))
        found.append((ip, int(hex_port, 16)))
    return found
