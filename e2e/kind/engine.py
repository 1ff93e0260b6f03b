"""The kind scenarios' Docker engine: a private one the tests start and stop, or the
machine's own.

Where no Docker engine runs (this project's CI machine has only a ``docker`` client),
the kind scenarios start one of their own from Debian's ``docker.io`` package:
``dockerd`` with its own data root (under the project cache, so the node image and
loaded images survive between runs), its own socket and state folder under ``/run``,
no default bridge, and no iptables or forwarding changes of its own. Its default
runtime is ``runc_shim.py`` (see there: ``--privileged`` on hosts whose root lacks
CAP_SYS_RESOURCE). The package's own system service is never started.

A kind cluster changes the host anyway: the kubelet in the node container sets the
shared kernel's ``panic``, overcommit and key quota settings, Docker adds a bridge
for kind's network, the cluster routes its ranges to the node. The engine takes the
same host lease as the real node, so the two never run at once, and writes into it,
before it changes anything, an ``EngineRecord`` (``engine_record.py``): the host as it
found it (:class:`HostSnapshot`), its state folder and pid file, and later each
cluster and route of the run. :meth:`DockerEngine.stop` puts the host back step by
step; a run killed before it stopped is put back by the next node or kind run to
take the lease. :class:`SystemEngine` does the same on an engine the machine already
runs, and never stops it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from e2e.controlplane.binaries import cache_dir
from e2e.kind.engine_record import (
    EngineRecord,
    PrivateEngine,
    clear_engine,
    empty_engine,
    recorded_dockerd,
    stop_dockerd,
    terminate,
)
from e2e.kind.routes import SavedRoute
from e2e.realnode.host import HostSnapshot, Teardown
from e2e.realnode.lease import LEASE_PATH, HostLease, claim_host

Log = Callable[[str], None]

#: The Debian package that provides ``dockerd`` (scripts/host-packages.sh installs it).
DOCKERD = Path("/usr/sbin/dockerd")
#: The engine's socket, state and pid file: in /run, so a reboot forgets them.
RUN_DIR = Path("/run/checkpointed-jobs-docker")
SHIM = Path(__file__).resolve().parent / "runc_shim.py"
#: The name under which the engine knows the shim (its default runtime).
RUNTIME_NAME = "cjob-runc"
#: The bridge the real node would create; the kind engine takes the host only when
#: no node holds it.
NODE_BRIDGE = "cni0"


class EngineError(RuntimeError):
    """The private engine could not start; says why, with the end of its log."""


def data_root() -> Path:
    return cache_dir() / "docker"


def missing_tools() -> list[str]:
    """What the private engine needs and this host lacks (as sentences)."""
    missing = []
    if not DOCKERD.exists():
        missing.append("dockerd (Debian package docker.io; `make host-packages` installs it)")
    if shutil.which("docker") is None:
        missing.append("the docker client (Debian package docker.io)")
    if not Path("/usr/bin/python3").exists():
        missing.append("/usr/bin/python3 (the runtime shim runs on the host's Python)")
    if os.geteuid() != 0:
        missing.append("root (dockerd, mounts, network namespaces)")
    return missing


def dockerd_argv(*, run_dir: Path, root: Path, runtime: Path) -> list[str]:
    """The engine's command line: everything in folders of its own, and nothing that
    changes the host's network (no default bridge, iptables or forwarding)."""
    return [
        str(DOCKERD),
        "--host", f"unix://{run_dir / 'docker.sock'}",
        "--data-root", str(root),
        "--exec-root", str(run_dir / "exec"),
        "--pidfile", str(run_dir / "dockerd.pid"),
        "--bridge=none",
        "--iptables=false",
        "--ip-forward=false",
        "--ip-masq=false",
        "--userland-proxy=true",
        "--add-runtime", f"{RUNTIME_NAME}={runtime}",
        "--default-runtime", RUNTIME_NAME,
        "--log-level", "warn",
    ]  # fmt: skip


@dataclass
class DockerEngine:
    """The running private engine; :meth:`env` points ``docker`` and kind at it."""

    run_dir: Path = RUN_DIR
    root: Path = field(default_factory=data_root)
    log: Log = lambda _: None
    lease_path: Path = LEASE_PATH
    _process: subprocess.Popen[bytes] | None = None
    _lease: HostLease | None = None
    _record: EngineRecord | None = None

    @property
    def socket(self) -> Path:
        return self.run_dir / "docker.sock"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "dockerd.pid"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "dockerd.log"

    @property
    def record(self) -> EngineRecord | None:
        """What undoes this run, as the host lease holds it (None: nothing recorded)."""
        return self._record

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for ``docker`` and ``kind``: this engine, the classic builder
        (the engine is Docker 20.10; the client may be newer and without buildx)."""
        env = dict(os.environ if base is None else base)
        env["DOCKER_HOST"] = self.docker_host
        env["DOCKER_BUILDKIT"] = "0"
        return env

    def docker(self, *args: str, timeout: float = 600, stdin: bytes | None = None,
               check: bool = True) -> subprocess.CompletedProcess[str]:  # fmt: skip
        proc = subprocess.run(
            ["docker", *args], env=self.env(), capture_output=True, timeout=timeout,
            input=stdin.decode() if stdin is not None else None, text=True, check=False,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise EngineError(f"docker {' '.join(args[:3])} failed: {proc.stderr.strip()}")
        return proc

    def start(self, *, timeout: float = 60.0) -> None:
        """Take the host (putting back what a killed run left), record it, start."""
        missing = self._missing_tools()
        if missing:
            raise EngineError("the kind scenarios' Docker engine needs " + "; ".join(missing))
        self._lease = claim_host(bridge=NODE_BRIDGE, path=self.lease_path, log=self.log)
        try:
            self._before_snapshot()
            # Recorded before the host changes, so a run killed from here on is put
            # back by the next one (``engine_record.py``).
            self._write(self._new_record(HostSnapshot.capture()))
            self._launch(timeout=timeout)
        except BaseException:
            self.stop()
            raise

    def remember_cluster(self, name: str) -> None:
        """Add a kind cluster to the record: before ``kind create cluster``."""
        if self._record is not None:
            self._write(self._record.with_cluster(name))

    def remember_route(self, route: SavedRoute) -> None:
        """Add a route, with the routes it replaces, to the record: before it is set."""
        if self._record is not None:
            self._write(self._record.with_route(route))

    def stop(self) -> list[str]:
        """Remove every container and network, stop the engine, put the host back;
        return (and log) what could not be put back.

        Step by step: a step that fails or times out is reported, and the next runs.
        The record is forgotten only when every step ran (an interrupted stop leaves
        it for the next run to finish).
        """
        teardown = Teardown(log=self.log)
        self._stop_engine(teardown)
        record = self._record
        if record is not None:
            teardown.step("kind run", lambda: clear_engine(record))
        lease = self._lease
        if lease is not None:
            if record is not None and not teardown.interrupted:
                teardown.step("lease record", lease.forget)
            teardown.step("lease", lease.release)
        self._record = None
        self._lease = None
        return teardown.finish()

    def _write(self, record: EngineRecord) -> None:
        if self._lease is not None:
            self._lease.record(record)
        self._record = record

    def _missing_tools(self) -> list[str]:
        return missing_tools()

    def _new_record(self, snapshot: HostSnapshot) -> EngineRecord:
        return EngineRecord(
            pid=os.getpid(), private=PrivateEngine(run_dir=self.run_dir, pid_file=self.pid_file),
            docker_host=self.docker_host, snapshot=snapshot,
        )  # fmt: skip

    def _before_snapshot(self) -> None:
        """An engine still running from a run that recorded nothing (before the lease
        held records): stop it before recording the host. A recorded one is stopped
        by ``claim_host`` already."""
        pid = recorded_dockerd(self.pid_file)
        if pid is not None:
            self.log(f"stopping a dockerd left running by an earlier run (pid {pid})")
        for problem in stop_dockerd(self.pid_file):
            self.log(problem)

    def _launch(self, *, timeout: float) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        runtime = self.run_dir / "runc"
        runtime.write_text(f'#!/bin/sh\nexec /usr/bin/python3 -I {SHIM} "$@"\n')
        runtime.chmod(0o755)
        argv = dockerd_argv(run_dir=self.run_dir, root=self.root, runtime=runtime)
        self.log(f"starting dockerd (data root {self.root})")
        with self.log_file.open("ab") as out:
            self._process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise EngineError(f"dockerd exited ({self._process.returncode}):\n{self._tail()}")
            proc = self.docker("version", "--format", "{{.Server.Version}}", check=False,
                               timeout=20)  # fmt: skip
            if proc.returncode == 0:
                self.log(f"dockerd {proc.stdout.strip()} ready")
                self._remove_leftover_containers()
                return
            if time.monotonic() > deadline:
                raise EngineError(f"dockerd did not answer in {timeout:.0f}s:\n{self._tail()}")
            time.sleep(0.5)

    def _remove_leftover_containers(self) -> None:
        """Containers an earlier run left in the data root (all are the scenarios')."""
        containers = self.docker("ps", "-aq", check=False, timeout=60).stdout.split()
        if containers:
            self.log(f"removing {len(containers)} container(s) left by an earlier run")
        for problem in empty_engine(self.docker_host):
            self.log(problem)

    def _stop_engine(self, teardown: Teardown) -> None:
        """The engine this process started: its containers, then itself (the rest is
        the record's: :func:`clear_engine`)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        teardown.step("containers", lambda: empty_engine(self.docker_host))
        teardown.step("dockerd", lambda: terminate(process.pid, timeout=60))

    def _tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class SystemEngine(DockerEngine):
    """The Docker engine the machine already runs: used as it is, never stopped.

    It still takes the host lease and records the host before the run changes it (the
    kubelet in a kind node sets the shared kernel's settings; the cluster adds routes),
    and :meth:`stop` puts back the run's clusters, routes and kernel settings, never
    the engine's own links and rules. Without root neither the lease nor the kernel
    settings can be written: the run then records nothing, and says so.
    """

    @property
    def docker_host(self) -> str:
        return os.environ.get("DOCKER_HOST", "")

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        return dict(os.environ if base is None else base)

    def start(self, *, timeout: float = 60.0) -> None:
        if os.geteuid() != 0:
            self.log("not root: the host lease is not taken, and the kernel settings the "
                     "kind node's kubelet changes are not put back")  # fmt: skip
            return
        super().start(timeout=timeout)

    def _missing_tools(self) -> list[str]:
        return []

    def _new_record(self, snapshot: HostSnapshot) -> EngineRecord:
        return EngineRecord(pid=os.getpid(), private=None, docker_host=self.docker_host,
                            snapshot=snapshot)  # fmt: skip

    def _before_snapshot(self) -> None:
        return None

    def _launch(self, *, timeout: float) -> None:
        return None

    def _stop_engine(self, teardown: Teardown) -> None:
        return None


def system_engine_answers() -> bool:
    """Whether the machine already runs a Docker engine the client reaches."""
    if shutil.which("docker") is None:
        return False
    try:
        proc = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, timeout=20, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def choose_engine(*, log: Log) -> DockerEngine:
    """The machine's own engine where one answers, the private one otherwise."""
    return SystemEngine(log=log) if system_engine_answers() else DockerEngine(log=log)


if __name__ == "__main__":  # a manual check: start, report, stop
    engine = DockerEngine(log=print)
    engine.start()
    print(engine.docker("info", "--format", "{{.ServerVersion}} {{.DefaultRuntime}}").stdout)
    print(engine.stop() or "host restored")
    sys.exit(0)
