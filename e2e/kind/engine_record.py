"""What undoes a kind run: its record in the host lease, and the clear-up of a run that
was killed before it stopped.

A kind run changes the host through the Docker engine it uses: the kubelet in the
node container sets kernel settings on the shared kernel, the engine adds a bridge
and mounts, the cluster routes its Service and pod ranges to the node. A run killed
with ``kill -9`` (a cancelled CI job) never stops, and the next run would record an
already changed host as the one to put back. So, like a real node, the engine writes
an :class:`EngineRecord` into the host lease (``e2e/realnode/lease.py``) before it
changes anything, and rewrites it before each further change (a cluster's name before
``kind create cluster``, a route with the one it replaces before ``ip route
replace``). The next run to take the lease finds the record and :func:`clear_engine`
finishes the killed run's stop, step by step.

Two kinds of engine: the **private** one the run started (``engine.py``) is the run's
own, so its containers are removed, it is stopped, its state folder unmounted, and
the whole host snapshot restored; the **system** engine the machine already runs is
never stopped, and its links and rules are its own, so only the recorded clusters'
containers, the routes and the kernel settings are put back.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from e2e.kind.routes import SavedRoute, restore_route
from e2e.realnode.host import (
    HostSnapshot,
    Teardown,
    restore_host,
    restore_settings,
    text_of,
    unmount_below,
)

#: The label kind puts on every node container of a cluster (its value: the name).
CLUSTER_LABEL = "io.x-k8s.kind.cluster"


class EngineKind(StrEnum):
    """Whose Docker engine a kind run used."""

    PRIVATE = "private"
    """Started by the run (``engine.py``): stopped, and the whole host put back."""
    SYSTEM = "system"
    """The machine's own: never stopped; the run's clusters, routes and kernel
    settings are put back, never the engine's links or rules."""


@dataclass(frozen=True)
class PrivateEngine:
    """Where the private engine keeps its state: socket, pid file, and the mounts it
    holds while it runs (network namespaces)."""

    run_dir: Path
    pid_file: Path


@dataclass(frozen=True)
class EngineRecord:
    """What undoes a kind run: written to the lease before the run changes the host."""

    HOLDER: ClassVar[str] = "kindEngine"

    pid: int
    private: PrivateEngine | None
    """The engine the run started, or None: the machine's own (never stopped)."""
    docker_host: str
    """``DOCKER_HOST`` for the engine (empty: the client's default)."""
    snapshot: HostSnapshot
    """The host before the run changed it."""
    clusters: tuple[str, ...] = ()
    routes: tuple[SavedRoute, ...] = ()

    @property
    def kind(self) -> EngineKind:
        return EngineKind.SYSTEM if self.private is None else EngineKind.PRIVATE

    def with_cluster(self, name: str) -> EngineRecord:
        return replace(self, clusters=(*self.clusters, name))

    def with_route(self, route: SavedRoute) -> EngineRecord:
        return replace(self, routes=(*self.routes, route))

    def to_json(self) -> dict[str, Any]:
        """The record's fields (the lease adds its format version and holder)."""
        private = self.private
        return {
            "pid": self.pid,
            "engine": self.kind.value,
            "runDir": None if private is None else str(private.run_dir),
            "pidFile": None if private is None else str(private.pid_file),
            "dockerHost": self.docker_host,
            "clusters": list(self.clusters),
            "routes": [route.to_json() for route in self.routes],
            "snapshot": self.snapshot.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineRecord:
        """Read :meth:`to_json`'s form; ``KeyError``, ``TypeError`` or ``ValueError``
        name what is wrong."""
        private = None
        if EngineKind(text_of(data["engine"])) is EngineKind.PRIVATE:
            private = PrivateEngine(run_dir=Path(text_of(data["runDir"])),
                                    pid_file=Path(text_of(data["pidFile"])))  # fmt: skip
        return cls(
            pid=int(data["pid"]),
            private=private,
            docker_host=text_of(data["dockerHost"]),
            clusters=tuple(text_of(name) for name in _list(data["clusters"])),
            routes=tuple(SavedRoute.from_json(route) for route in _list(data["routes"])),
            snapshot=HostSnapshot.from_json(data["snapshot"]),
        )


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{value!r} is not a list")
    return value


def docker_env(docker_host: str) -> dict[str, str]:
    """The environment of a ``docker`` command against the recorded engine."""
    env = dict(os.environ)
    env.pop("DOCKER_HOST", None)
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    return env


def docker(docker_host: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], env=docker_env(docker_host), capture_output=True,
                          text=True, check=False, timeout=timeout)  # fmt: skip


def is_dockerd(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/exe").resolve().name == "dockerd"
    except OSError:
        return False


def recorded_dockerd(pid_file: Path) -> int | None:
    """The pid of the running ``dockerd`` the pid file names, if any."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if is_dockerd(pid) else None


def running(pid: int) -> bool:
    """Alive, not a zombie waiting for its parent (init, for a killed run's engine)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def terminate(pid: int, *, timeout: float) -> None:
    """SIGTERM (dockerd stops its containers and its containerd), then SIGKILL the
    whole group (the engine runs in a session of its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and running(pid):
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def remove_containers(docker_host: str, *, label: str | None = None) -> list[str]:
    """Every container of the engine (or those with ``label``), with their volumes."""
    listing = ["ps", "-aq", *(["--filter", f"label={label}"] if label else [])]
    found = docker(docker_host, *listing, timeout=60)
    if found.returncode != 0:
        return [f"docker ps: {found.stderr.strip()}"]
    containers = found.stdout.split()
    if not containers:
        return []
    removed = docker(docker_host, "rm", "-f", "-v", *containers, timeout=300)
    if removed.returncode != 0:
        return [f"docker rm: {removed.stderr.strip()}"]
    return []


def empty_engine(docker_host: str) -> list[str]:
    """Every container and network of the private engine (all are the scenarios')."""
    problems = remove_containers(docker_host)
    pruned = docker(docker_host, "network", "prune", "-f", timeout=60)
    if pruned.returncode != 0:
        problems.append(f"docker network prune: {pruned.stderr.strip()}")
    return problems


def _clear_private_engine(pid_file: Path, docker_host: str) -> list[str]:
    """The killed run's containers and networks, while its engine still runs."""
    if recorded_dockerd(pid_file) is None:
        return []  # stopped: its containers stopped with it
    return empty_engine(docker_host)


def stop_dockerd(pid_file: Path, *, timeout: float = 30) -> list[str]:
    """Stop the engine the pid file names, if it runs; forget the pid file."""
    pid = recorded_dockerd(pid_file)
    if pid is not None:
        terminate(pid, timeout=timeout)
    pid_file.unlink(missing_ok=True)
    if pid is not None and running(pid) and is_dockerd(pid):
        return [f"dockerd (pid {pid}) still runs"]
    return []


def clear_engine(record: EngineRecord) -> list[str]:
    """Finish the stop of a kind run that did not stop; return what stays changed.

    Every step runs whatever the others did (:class:`Teardown`): the containers first
    (so no kubelet sets anything again), then the engine and its mounts, the routes,
    and last the recorded host.
    """
    teardown = Teardown()
    private = record.private
    if private is not None:
        teardown.step("containers",
                      lambda: _clear_private_engine(private.pid_file, record.docker_host))
        teardown.step("dockerd", lambda: stop_dockerd(private.pid_file))
        teardown.step("mounts", lambda: unmount_below(private.run_dir))
    else:
        for name in record.clusters:
            remove = functools.partial(remove_containers, record.docker_host,
                                       label=f"{CLUSTER_LABEL}={name}")  # fmt: skip
            teardown.step(f"kind cluster {name}", remove)
    for route in record.routes:
        teardown.step(f"route {route.destination}", functools.partial(restore_route, route))
    if private is not None:
        teardown.step("host", lambda: restore_host(record.snapshot))
    else:
        teardown.step("kernel settings", lambda: restore_settings(record.snapshot.sysctls))
    return teardown.finish()
