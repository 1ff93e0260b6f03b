"""The operator as a real process against the local control plane, and its CRD.

Tests and benchmarks run ``python -m cjob_operator`` exactly as the Helm chart's
Deployment does (minus the container): its own process, a kubeconfig, metrics
and health ports. This module is the one place that starts, watches and stops it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import yaml

from e2e.controlplane.procs import free_port
from e2e.controlplane.rest import ApiError, RestClient
from e2e.controlplane.waiting import wait_for
from e2e.repo import REPO_ROOT

CRD_FILE = REPO_ROOT / "crds" / "checkpointedjob.yaml"
CRD_NAME = "checkpointedjobs.checkpointed.io"
SNAPSHOT_CRD_FILE = REPO_ROOT / "crds" / "checkpointedjobsnapshot.yaml"
JOBS_PATH = "/apis/checkpointed.io/v1alpha1/namespaces/{namespace}/checkpointedjobs"
SNAPSHOTS_PATH = "/apis/checkpointed.io/v1alpha1/namespaces/{namespace}/checkpointedjobsnapshots"
CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def install_crd(rest: RestClient) -> None:
    """Create or update the CheckpointedJob and CheckpointedJobSnapshot CRDs and wait
    until they are served."""
    for file in (CRD_FILE, SNAPSHOT_CRD_FILE):
        _install(rest, yaml.safe_load(file.read_text()))


def _install(rest: RestClient, crd: dict[str, object]) -> None:
    name = str(crd["metadata"]["name"])  # type: ignore[index]
    try:
        rest.request("POST", CRDS_PATH, body=crd)
    except ApiError as exc:
        if exc.status != 409:
            raise
        current = rest.get(f"{CRDS_PATH}/{name}")
        crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]  # type: ignore[index]
        rest.request("PUT", f"{CRDS_PATH}/{name}", body=crd)

    def established() -> bool:
        conditions = (rest.get(f"{CRDS_PATH}/{name}").get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    wait_for(established, what=f"the CRD {name} to be established", timeout=60)


class OperatorExited(RuntimeError):
    """The operator process ended while it was expected to run."""

    def __init__(self, *, returncode: int, log_tail: str) -> None:
        super().__init__(f"the operator exited with {returncode}:\n{log_tail}")
        self.returncode = returncode


class OperatorProcess:
    """``python -m cjob_operator --namespace NS --standalone`` with its log in a file."""

    def __init__(
        self,
        *,
        namespace: str,
        kubeconfig: Path,
        log_file: Path,
        mode: tuple[str, ...] = ("--standalone",),
        verbose: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.namespace = namespace
        self.mode = mode
        self.verbose = verbose
        self.kubeconfig = kubeconfig
        self.log_file = log_file
        self.env = dict(env if env is not None else os.environ)
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, timeout: float = 90.0) -> None:
        """Start it and wait until its liveness endpoint answers."""
        env = {**self.env, "KUBECONFIG": str(self.kubeconfig)}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        verbose = ["--verbose"] if self.verbose else []
        with self.log_file.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cjob_operator", "--namespace", self.namespace,
                 *self.mode, "--metrics-port", str(self.metrics_port),
                 "--health-port", str(self.health_port), *verbose],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT,
                start_new_session=True,
            )
        wait_for(self._healthy, what="the operator's liveness endpoint", timeout=timeout,
                 interval=0.5)

    def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise OperatorExited(returncode=self.process.returncode, log_tail=self.log_tail())
        try:
            with urllib.request.urlopen(self.url(self.health_port, "/healthz"), timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @staticmethod
    def url(port: int, path: str) -> str:
        return f"http://127.0.0.1:{port}{path}"

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url(self.metrics_port, "/metrics"), timeout=10) as r:
            return str(r.read().decode())

    def memory_mb(self) -> dict[str, float]:
        """``VmRSS`` (now) and ``VmHWM`` (peak) of the operator process, in MiB."""
        found: dict[str, float] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) / 1024.0
        return found

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """SIGTERM (the operator finishes its handlers), then SIGKILL after 30 s."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
