"""A hostile peer on the network of a running job, on real Spark in local mode.

The peer finds every TCP port the job's Python processes listen on (the
coordinator in the driver, the channel listeners in the subtasks) and sends each
of them a pickle whose unpickling would create a marker file, framed as a
coordinator message and as a channel greeting. None of it may be unpickled, each
connection must be closed, and the job must still end with exactly-once output.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
from pathlib import Path

from runtime_harness import JobHarness

from job_runtime.execution.driver.spark_start import WORKER_DAEMON

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
