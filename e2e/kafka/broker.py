"""One real Apache Kafka broker on loopback: KRaft, a single node that is its own controller.

The broker is the released ``kafka.Kafka`` from the jars :mod:`e2e.kafka.jars` fetches,
not a mock: transactions, fencing, ``read_committed`` and restarts behave as in
production. Its settings are production's with the replication a single node can
give (factor 1 and a minimum of one in-sync replica for the offsets and transaction
state topics, without which transactions never start), no rebalance delay (tests
would wait 3 s per new group), fewer partitions for the internal topics (50 each
would take seconds to create on two cores), and a transaction timeout ceiling of an
hour, so a job may keep a transaction open across a slow checkpoint.

Both ports are chosen free when the broker is created and kept for its lifetime, and
the data lives in ``work_dir/data``: :meth:`KafkaBroker.restart` brings back the same
broker at the same address with everything it had, as a real broker restart does.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient

from e2e.kafka.jars import classpath, require_java
from e2e.local_service import HOST, pid_alive, port_open, tail_file

DEFAULT_HEAP_MB = 512
DEFAULT_START_TIMEOUT = 120.0
DEFAULT_STOP_GRACE = 30.0
ONE_HOUR_MS = 3_600_000
INTERNAL_TOPIC_PARTITIONS = 4


class BrokerStartError(RuntimeError):
    """Raised when the broker exits or does not serve metadata in time; has the log's tail."""

    def __init__(self, *, reason: str, log_path: Path) -> None:
        self.reason = reason
        self.log_path = log_path
        self.log_tail = tail_file(log_path)
        super().__init__(f"Kafka broker {reason} (log: {log_path}); its last lines:\n"
                         f"{self.log_tail}")  # fmt: skip


class KafkaBroker:
    """A KRaft broker+controller process with its configuration, data and log in ``work_dir``.

    ``die_with_parent`` asks the kernel to stop the broker when the process that started
    it dies, so a test run killed mid-way leaves no broker behind; a broker meant to
    outlive its starter (``python -m e2e.kafka up``) leaves it off. The kernel ties that
    signal to the *thread* that started the broker: call :meth:`start` from a thread
    that lives as long as the broker should (a test's main thread), never from a
    short-lived helper thread.
    """

    def __init__(
        self,
        *,
        work_dir: Path,
        jar_dir: Path,
        heap_mb: int = DEFAULT_HEAP_MB,
        die_with_parent: bool = False,
    ) -> None:
        self.work_dir = work_dir
        self.jar_dir = jar_dir
        self.heap_mb = heap_mb
        self.die_with_parent = die_with_parent
        self.port, self.controller_port = free_ports(2)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` value clients use: ``127.0.0.1:<port>``."""
        return f"{HOST}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def config_path(self) -> Path:
        return self.work_dir / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "broker.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, *, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Start the broker (formatting its storage the first time) and wait until it serves.

        Raises :class:`BrokerStartError` with the log's tail when it exits or does not
        answer a metadata request within ``timeout`` seconds (the broker is stopped then).
        """
        if self.is_running():
            return
        java = require_java()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self._server_properties())
        cp = classpath(self.jar_dir)
        if not (self.data_dir / "meta.properties").exists():
            self._format(java=java, cp=cp)
        argv = [
            java, f"-Xmx{self.heap_mb}m", "-Djava.awt.headless=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dorg.slf4j.simpleLogger.log.kafka.server.KafkaRaftServer=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            "-cp", cp, "kafka.Kafka", str(self.config_path),
        ]  # fmt: skip
        if self.die_with_parent and shutil.which("setpriv"):
            # setpriv (util-linux) sets the parent-death signal and execs java; doing it
            # here in a preexec_fn would run Python in a forked child of a threaded process.
            argv = ["setpriv", "--pdeathsig", "TERM", "--", *argv]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv,
                cwd=self.work_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_until_serving(timeout=timeout)
        except BaseException:
            self.stop(grace=5.0)
            raise

    def stop(self, *, grace: float = DEFAULT_STOP_GRACE) -> None:
        """SIGTERM (a clean shutdown that flushes the logs), SIGKILL after ``grace`` seconds.

        ``grace=0`` kills at once: the broker crashing, for tests of unclean restarts.
        """
        proc = self.process
        if proc is None:
            return
        stop_process_group(proc.pid, grace=grace, is_alive=lambda: proc.poll() is None)
        proc.wait()
        self.process = None

    def restart(
        self, *, grace: float = DEFAULT_STOP_GRACE, timeout: float = DEFAULT_START_TIMEOUT
    ) -> None:
        """Stop the broker and start it again on the same ports with the same data."""
        self.stop(grace=grace)
        self.start(timeout=timeout)

    def _server_properties(self) -> str:
        listeners = f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}"
        return single_node_properties(
            controller=f"{HOST}:{self.controller_port}", listeners=listeners,
            advertised=listeners, inter_broker_listener="PLAINTEXT",
            protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT", log_dirs=str(self.data_dir))

    def _format(self, *, java: str, cp: str) -> None:
        argv = [
            java, "-cp", cp, "kafka.tools.StorageTool", "format", "--standalone",
            "-t", new_cluster_id(), "-c", str(self.config_path),
        ]  # fmt: skip
        # The tool prints the whole configuration: it gets a log of its own.
        format_log = self.work_dir / "format.log"
        with format_log.open("wb") as log:
            code = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, check=False
            ).returncode
        if code != 0:
            raise BrokerStartError(
                reason=f"storage could not be formatted (exit code {code})", log_path=format_log
            )

    def _wait_until_serving(self, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        # A closed port first, cheaply: asking librdkafka earlier only fills stderr with
        # its connection-refused lines.
        while not port_open(self.port):
            self._check_alive()
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    reason=f"did not open {self.bootstrap} within {timeout:.0f}s",
                    log_path=self.log_path,
                )
            time.sleep(0.1)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        while True:
            self._check_alive()
            with contextlib.suppress(Exception):
                if admin.list_topics(timeout=2.0).brokers:
                    return
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    reason=f"did not serve metadata within {timeout:.0f}s", log_path=self.log_path
                )
            time.sleep(0.2)

    def _check_alive(self) -> None:
        proc = self.process
        if proc is not None and proc.poll() is not None:
            raise BrokerStartError(
                reason=f"exited with code {proc.returncode}", log_path=self.log_path
            )


def single_node_properties(*, controller: str, listeners: str, advertised: str,
                           inter_broker_listener: str, protocols: str, log_dirs: str) -> str:
    """``server.properties`` of a one-node KRaft broker and controller: replication of
    one for the internal topics, no rebalance delay, transactions up to an hour. The
    listeners are the caller's (loopback here, the cluster's names in a pod)."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": controller,
        "listeners": listeners,
        "advertised.listeners": advertised,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": inter_broker_listener,
        "listener.security.protocol.map": protocols,
        "log.dirs": log_dirs,
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": str(INTERNAL_TOPIC_PARTITIONS),
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": str(INTERNAL_TOPIC_PARTITIONS),
        "transaction.max.timeout.ms": str(ONE_HOUR_MS),
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def new_cluster_id() -> str:
    """A Kafka cluster id (what ``StorageTool random-uuid`` prints), without a JVM start.

    It is 16 random bytes in URL-safe base64 without padding; like Kafka, ids starting
    with ``-`` are drawn again, as a command line would read them as options.
    """
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports nobody listens on right now."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((HOST, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def stop_process_group(
    pid: int, *, grace: float, is_alive: Callable[[], bool] | None = None
) -> None:
    """SIGTERM the process group ``pid`` leads, SIGKILL it if still alive after ``grace``.

    Returns once the process is gone (or after five more seconds), so its ports are closed.
    """
    alive = is_alive or (lambda: pid_alive(pid))
    if grace > 0:
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while alive() and time.monotonic() < deadline:
            time.sleep(0.1)
    _signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)





def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
