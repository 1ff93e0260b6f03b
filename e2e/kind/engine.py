"""A private Docker engine for the kind scenarios, started by the tests and stopped after.

Where no Docker engine runs (this project's CI machine has only a ``docker`` client),
the kind scenarios start one of their own from Debian's ``docker.io`` package:
``dockerd`` with its own data root (under the project cache, so the node image and
loaded images survive between runs), its own socket and state folder under ``/run``,
no default bridge, and no iptables or forwarding changes of its own. Its default
runtime is ``runc_shim.py`` (see there: ``--privileged`` on hosts whose root lacks
CAP_SYS_RESOURCE). The package's own system service is never started.

A kind cluster changes the host anyway: the kubelet in the node container sets the
kernel's ``panic`` settings, Docker adds a bridge for kind's network. The engine
records the host (:class:`HostSnapshot`) before it starts and puts it back after it
stopped, and takes the same host lease as the real node, so the two never run at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from e2e.controlplane.binaries import cache_dir
from e2e.realnode.host import HostSnapshot, restore_host
from e2e.realnode.lease import HostLease, claim_host

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
    _process: subprocess.Popen[bytes] | None = None
    _snapshot: HostSnapshot | None = None
    _lease: HostLease | None = None

    @property
    def socket(self) -> Path:
        return self.run_dir / "docker.sock"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "dockerd.log"

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for ``docker`` and ``kind``: this engine, the classic builder
        (the engine is Docker 20.10; the client may be newer and without buildx)."""
        env = dict(os.environ if base is None else base)
        env["DOCKER_HOST"] = f"unix://{self.socket}"
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
        missing = missing_tools()
        if missing:
            raise EngineError("the kind scenarios' Docker engine needs " + "; ".join(missing))
        self._lease = claim_host(bridge=NODE_BRIDGE, log=self.log)
        try:
            self._start(timeout=timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, *, timeout: float) -> None:
        self._stop_leftover()
        self._snapshot = HostSnapshot.capture()
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
                self._remove_containers(reason="left by an earlier run that did not stop")
                return
            if time.monotonic() > deadline:
                raise EngineError(f"dockerd did not answer in {timeout:.0f}s:\n{self._tail()}")
            time.sleep(0.5)

    def _remove_containers(self, *, reason: str) -> None:
        """Every container and network of this engine (all are the scenarios')."""
        containers = self.docker("ps", "-aq", check=False, timeout=60).stdout.split()
        if containers:
            if reason:
                self.log(f"removing {len(containers)} container(s) {reason}")
            self.docker("rm", "-f", "-v", *containers, check=False, timeout=300)
        self.docker("network", "prune", "-f", check=False, timeout=60)

    def _tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _stop_leftover(self) -> None:
        """An engine of an earlier run that was killed before it stopped: stop it."""
        pid_file = self.run_dir / "dockerd.pid"
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            return
        if _is_dockerd(pid):
            self.log(f"stopping a dockerd left running by an earlier run (pid {pid})")
            _terminate(pid, timeout=30)
        pid_file.unlink(missing_ok=True)

    def stop(self) -> list[str]:
        """Remove every container and network, stop the engine, put the host back;
        return what could not be restored."""
        problems: list[str] = []
        if self._process is not None and self._process.poll() is None:
            self._remove_containers(reason="")
            _terminate(self._process.pid, timeout=60)
        self._process = None
        _unmount_below(self.run_dir)
        if self._snapshot is not None:
            problems = restore_host(self._snapshot)
            self._snapshot = None
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        for problem in problems:
            self.log(f"host not fully restored: {problem}")
        return problems


def _is_dockerd(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/exe").resolve().name == "dockerd"
    except OSError:
        return False


def _terminate(pid: int, *, timeout: float) -> None:
    """SIGTERM (dockerd stops its containerd), then SIGKILL the whole group."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _unmount_below(root: Path) -> None:
    """The engine's state folder holds mounts (network namespaces) while it runs."""
    prefix = str(root.resolve()) + "/"
    try:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return
    for target in sorted((m for m in mounts if m.startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True, check=False)


if __name__ == "__main__":  # a manual check: start, report, stop
    engine = DockerEngine(log=print)
    engine.start()
    print(engine.docker("info", "--format", "{{.ServerVersion}} {{.DefaultRuntime}}").stdout)
    print(engine.stop() or "host restored")
    sys.exit(0)
