"""A process node: a stand-in kubelet that runs each container as a local process.

The image is ignored: the host (its Python virtualenv first on ``PATH``) is the
image. Everything a workload can observe through the API behaves like a kubelet:
the Node with its Ready condition and heartbeat Lease, pod phases and container
states, restart counts, graceful deletion, service account tokens, the
``KUBERNETES_SERVICE_*`` variables, exec readiness probes, and a temporary directory
of each pod's own (``TMPDIR``), as each container has its own ``/tmp``. The node talks to the apiserver as
``system:node:<name>`` so the Node authorizer limits it exactly as it would a kubelet,
and each pod talks to the apiserver with its own service account's token, so RBAC in
tests is the real thing.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.controlplane.controlplane import ControlPlane
from e2e.controlplane.kubeconfig import write_kubeconfig
from e2e.controlplane.kubelet_api import KubeletApiServer
from e2e.controlplane.pki import issue_cert
from e2e.controlplane.rest import STRATEGIC_MERGE_PATCH, ApiError, RestClient, quote

POD_IP = "127.0.0.1"
TERMINATION_LOG_LINES = 80
TERMINATION_LOG_BYTES = 2048
"""The kubelet's limits for a termination message taken from the log."""
LEASE_DURATION_SECONDS = 40
HEARTBEAT_SECONDS = 10.0
TOKEN_EXPIRATION_SECONDS = 24 * 3600
SERVICEACCOUNT_DIR_ENV = "CJOB_SERVICEACCOUNT_DIR"
POD_DIR_ENV = "CJOB_POD_DIR"
PASSTHROUGH_ENV = (
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "TZ",
    "USER",
    "JAVA_HOME",
    "SPARK_HOME",
    "PYTHONPATH",
    "CJOB_CACHE_DIR",
)


class PodNotFoundError(LookupError):
    """Raised when a helper is asked about a pod this node never ran."""

    def __init__(self, *, namespace: str, name: str) -> None:
        self.namespace = namespace
        self.name = name
        super().__init__(f"pod {namespace}/{name} has not run on this process node")


class ContainerConfigError(RuntimeError):
    """A container cannot be configured yet (missing Secret/ConfigMap key, token...)."""

    def __init__(self, *, container: str, detail: str) -> None:
        self.container = container
        self.detail = detail
        super().__init__(f"container {container}: {detail}")


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def exit_code_of(returncode: int) -> tuple[int, int | None]:
    """Map ``Popen.returncode`` to a container exit code and signal, as a shell would."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


def expand_references(value: str, env: dict[str, str]) -> str:
    """Expand ``$(VAR)`` like the kubelet; ``$$(VAR)`` escapes to a literal ``$(VAR)``."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0).startswith("$$"):
            return match.group(0)[1:]
        name = match.group(1)
        return env.get(name, match.group(0))

    return re.sub(
        r"\$\$\([A-Za-z_][A-Za-z0-9_.-]*\)|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", replace, value
    )


@dataclass
class ContainerRun:
    """The node-side state of one container of a pod."""

    name: str
    spec: dict[str, Any]
    is_init: bool = False
    process: subprocess.Popen[bytes] | None = None
    started_at: str | None = None
    restart_count: int = 0
    state: dict[str, Any] = field(
        default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}}
    )
    last_state: dict[str, Any] = field(default_factory=dict)
    next_start: float = 0.0
    backoff: float = 0.0
    done: bool = False
    succeeded: bool = False
    restart_pending: bool = False
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    probe_passed: bool = False
    next_probe: float = 0.0

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def readiness_probe(self) -> dict[str, Any] | None:
        probe = self.spec.get("readinessProbe")
        return probe if isinstance(probe, dict) else None

    def is_ready(self) -> bool:
        """Running, and its readiness probe (if it has one) passed the last time."""
        if self.is_init or not self.is_running():
            return False
        return self.readiness_probe is None or self.probe_passed


class PodWorker(threading.Thread):
    """Runs one pod (identified by its UID) from start to termination."""

    def __init__(self, *, node: ProcessNode, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}-{meta['name']}", daemon=True)
        self.node = node
        self.pod = pod
        self.namespace: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.pod_dir = node.pods_dir / f"{self.namespace}_{self.pod_name}_{self.uid[:8]}"
        spec = pod["spec"]
        self.restart_policy: str = spec.get("restartPolicy", "Always")
        self.init_containers = [
            ContainerRun(name=c["name"], spec=c, is_init=True)
            for c in spec.get("initContainers") or []
        ]
        self.containers = [ContainerRun(name=c["name"], spec=c) for c in spec["containers"]]
        self.start_time = now_rfc3339()
        self.phase = "Pending"
        self.conditions: dict[str, tuple[str, str]] = {}
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.delete_requested = False
        self.grace_seconds = 30.0
        self.forgotten = False
        self.finished = threading.Event()
        self.base_env: dict[str, str] | None = None

    # -- signals from the node ------------------------------------------------------

    def update(self, pod: dict[str, Any]) -> None:
        """Take the latest copy of the pod; start termination if it is being deleted."""
        with self.lock:
            self.pod = pod
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") and not self.delete_requested:
                self.delete_requested = True
                grace = meta.get("deletionGracePeriodSeconds")
                self.grace_seconds = float(grace if grace is not None else 30)
        self.wake.set()

    def forget(self) -> None:
        """The pod object is gone: stop its processes without reporting status."""
        with self.lock:
            self.forgotten = True
            if not self.delete_requested:
                self.delete_requested = True
                self.grace_seconds = 2.0
        self.wake.set()

    # -- main loop -----------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # keep the node alive whatever one pod does
            self.node.log(f"pod {self.namespace}/{self.pod_name}: worker crashed: {exc!r}")
            self._kill_all(grace=0)
        finally:
            self.finished.set()

    def _run(self) -> None:
        self.pod_dir.mkdir(parents=True, exist_ok=True)
        self._set_condition("PodScheduled", "True")
        self._set_condition("PodReadyToStartContainers", "True")
        self._set_condition("Initialized", "False" if self.init_containers else "True")
        self._set_condition("ContainersReady", "False")
        self._set_condition("Ready", "False")
        for run in self.containers:
            if self.init_containers:
                run.state = {"waiting": {"reason": "PodInitializing"}}
        self._push_status()
        while not self._stopping():
            try:
                self.base_env = self._build_base_env()
                break
            except (ContainerConfigError, ApiError, OSError) as exc:
                self._config_error(self.init_containers + self.containers, str(exc))
                self.wake.wait(2.0)
                self.wake.clear()
        while not self._stopping():
            changed = self._step()
            if changed:
                self._push_status()
            if self.phase in ("Succeeded", "Failed"):
                break
            self.wake.wait(0.2)
            self.wake.clear()
        if self._stopping():
            self._terminate()

    def _stopping(self) -> bool:
        with self.lock:
            return self.delete_requested

    def _step(self) -> bool:
        """Reap exited processes, (re)start containers, derive the phase."""
        changed = False
        pending_init = [c for c in self.init_containers if not c.succeeded]
        if pending_init:
            run = pending_init[0]
            changed |= self._reap(run)
            if not run.succeeded and not run.done:
                changed |= self._maybe_start(run)
            if run.done and not run.succeeded:
                self.phase = "Failed"
                self._hold_main_containers()
                return True
            if all(c.succeeded for c in self.init_containers):
                self._set_condition("Initialized", "True")
                for c in self.containers:
                    c.state = {"waiting": {"reason": "ContainerCreating"}}
                changed = True
            return changed
        for run in self.containers:
            changed |= self._reap(run)
            if not run.done:
                changed |= self._maybe_start(run)
            changed |= self._probe(run)
        changed |= self._derive_phase()
        return changed

    def _probe(self, run: ContainerRun) -> bool:
        """Run an exec readiness probe when it is due; True if readiness changed.

        The command runs as the container would run it (its environment and working
        directory); only ``exec`` probes are supported, as the node runs no network
        namespace of the pod's own to reach.
        """
        probe = run.readiness_probe
        if probe is None or not run.is_running():
            was, run.probe_passed = run.probe_passed, False
            return was
        now = time.monotonic()
        if now < run.next_probe:
            return False
        command = (probe.get("exec") or {}).get("command")
        period = float(probe.get("periodSeconds") or 10)
        timeout = float(probe.get("timeoutSeconds") or 1)
        run.next_probe = now + period
        passed = False
        if isinstance(command, list) and command:
            try:
                passed = subprocess.run(
                    [str(part) for part in command], cwd=run.cwd or None, env=run.env,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, timeout=timeout, check=False,
                ).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                passed = False
        was, run.probe_passed = run.probe_passed, passed
        return was != passed

    def _reap(self, run: ContainerRun) -> bool:
        proc = run.process
        if proc is None or proc.poll() is None:
            return False
        code, sig = exit_code_of(proc.returncode)
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": run.started_at,
            "finishedAt": now_rfc3339(),
            "containerID": f"process://{proc.pid}",
        }
        if sig is not None:
            terminated["signal"] = sig
        message = self._termination_message(run, code=code)
        if message:
            terminated["message"] = message
        run.process = None
        self.node.log(f"pod {self.namespace}/{self.pod_name}: {run.name} exited with {code}")
        restart = self.restart_policy == "Always" or (
            self.restart_policy == "OnFailure" and code != 0
        )
        if run.is_init:
            restart = code != 0 and self.restart_policy != "Never"
        if restart:
            run.last_state = {"terminated": terminated}
            run.restart_pending = True
            run.backoff = (
                self.node.restart_backoff_initial
                if run.backoff == 0
                else min(run.backoff * 2, self.node.restart_backoff_max)
            )
            run.next_start = time.monotonic() + run.backoff
            run.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {run.backoff:.0f}s restarting failed container",
                }
            }
        else:
            run.state = {"terminated": terminated}
            run.done = True
            run.succeeded = code == 0
        self._set_condition("ContainersReady", "False")
        self._set_condition("Ready", "False")
        return True

    def _maybe_start(self, run: ContainerRun) -> bool:
        if run.process is not None or time.monotonic() < run.next_start:
            return False
        try:
            argv, env, cwd = self._container_launch(run)
        except (ContainerConfigError, ApiError) as exc:
            self._config_error([run], str(exc))
            run.next_start = time.monotonic() + 2.0
            return True
        if run.restart_pending:
            run.restart_pending = False
            run.restart_count += 1
        log_file = self.log_path(run.name, restart=run.restart_count)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        run.started_at = now_rfc3339()
        run.env, run.cwd, run.probe_passed, run.next_probe = env, cwd, False, 0.0
        try:
            with log_file.open("ab") as log:
                run.process = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as exc:
            # Like a runtime that cannot exec the entrypoint: exit code 128, StartError.
            terminated = {
                "exitCode": 128,
                "reason": "StartError",
                "message": str(exc),
                "startedAt": run.started_at,
                "finishedAt": now_rfc3339(),
            }
            restart = self.restart_policy != "Never"
            if restart:
                run.last_state = {"terminated": terminated}
                run.restart_pending = True
                run.backoff = min(
                    max(run.backoff * 2, self.node.restart_backoff_initial),
                    self.node.restart_backoff_max,
                )
                run.next_start = time.monotonic() + run.backoff
                run.state = {"waiting": {"reason": "CrashLoopBackOff", "message": str(exc)}}
            else:
                run.state = {"terminated": terminated}
                run.done = True
            return True
        self.node.log(
            f"pod {self.namespace}/{self.pod_name}: started {run.name} pid {run.process.pid}"
        )
        run.state = {"running": {"startedAt": run.started_at}}
        return True

    def _derive_phase(self) -> bool:
        before = (self.phase, dict(self.conditions))
        runs = self.containers
        if all(r.done for r in runs):
            self.phase = "Succeeded" if all(r.succeeded for r in runs) else "Failed"
        elif any(r.is_running() or r.done or r.restart_count for r in runs) and all(
            r.started_at is not None for r in runs
        ):
            self.phase = "Running"
        ready = all(r.is_ready() for r in runs)
        self._set_condition("ContainersReady", "True" if ready else "False")
        self._set_condition("Ready", "True" if ready else "False")
        return (self.phase, self.conditions) != before

    def _hold_main_containers(self) -> None:
        """After a failed init container the main containers never start."""
        for run in self.containers:
            if "waiting" in run.state:
                run.state = {"waiting": {"reason": "PodInitializing"}}

    def _config_error(self, runs: list[ContainerRun], message: str) -> None:
        for run in runs:
            if run.process is None:
                run.state = {
                    "waiting": {"reason": "CreateContainerConfigError", "message": message}
                }
        self._push_status()

    # -- termination ---------------------------------------------------------------

    def _terminate(self) -> None:
        with self.lock:
            grace = self.grace_seconds
            forgotten = self.forgotten
        self._kill_all(grace=grace)
        for run in self.init_containers + self.containers:
            # A container waiting to be restarted ends with its last termination.
            if "terminated" not in run.state and "terminated" in run.last_state:
                run.state = run.last_state
        if forgotten:
            return
        if self.phase not in ("Succeeded", "Failed"):
            codes = [
                r.state.get("terminated", {}).get("exitCode", 0)
                for r in self.containers
                if r.started_at is not None
            ]
            self.phase = "Succeeded" if codes and all(c == 0 for c in codes) else "Failed"
        self._set_condition("ContainersReady", "False")
        self._set_condition("Ready", "False")
        self._push_status()
        try:
            self.node.client.request(
                "DELETE",
                f"/api/v1/namespaces/{quote(self.namespace)}/pods/{quote(self.pod_name)}",
                body={
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": self.uid},
                },
            )
        except ApiError as exc:
            if exc.status not in (404, 409):
                self.node.log(f"pod {self.namespace}/{self.pod_name}: final delete: {exc}")

    def _kill_all(self, *, grace: float) -> None:
        """SIGTERM every process group, wait up to ``grace`` seconds, then SIGKILL."""
        runs = [r for r in self.init_containers + self.containers if r.is_running()]
        for run in runs:
            self._signal(run, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(r.is_running() for r in runs) and time.monotonic() < deadline:
            time.sleep(0.05)
        for run in runs:
            self._signal(run, signal.SIGKILL)
            if run.process is not None:
                run.process.wait()
        for run in runs:
            self._reap_final(run)

    def _reap_final(self, run: ContainerRun) -> None:
        proc = run.process
        if proc is None:
            return
        code, sig = exit_code_of(proc.returncode)
        terminated: dict[str, Any] = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": run.started_at,
            "finishedAt": now_rfc3339(),
            "containerID": f"process://{proc.pid}",
        }
        if sig is not None:
            terminated["signal"] = sig
        run.state = {"terminated": terminated}
        run.process = None
        run.done = True
        run.succeeded = code == 0

    @staticmethod
    def _signal(run: ContainerRun, sig: signal.Signals) -> None:
        if run.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.process.pid, sig)

    def kill(self, *, container: str | None, sig: signal.Signals) -> int:
        """Send ``sig`` to the process group of a container (all when ``None``)."""
        count = 0
        for run in self.init_containers + self.containers:
            if (container is None or run.name == container) and run.is_running():
                self._signal(run, sig)
                count += 1
        self.wake.set()
        return count

    def _termination_message(self, run: ContainerRun, *, code: int) -> str | None:
        """``terminationMessagePolicy: FallbackToLogsOnError``, as the kubelet has it: a
        failed container's message is the tail of its log (the file at
        ``terminationMessagePath`` is a container path, which host processes lack)."""
        if code == 0 or run.spec.get("terminationMessagePolicy") != "FallbackToLogsOnError":
            return None
        try:
            data = self.log_path(run.name, restart=run.restart_count).read_bytes()
        except OSError:
            return None
        lines = data.decode("utf-8", "replace").splitlines()[-TERMINATION_LOG_LINES:]
        text = "\n".join(lines)
        return text[-TERMINATION_LOG_BYTES:] or None

    # -- environment -----------------------------------------------------------------

    def log_path(self, container: str, *, restart: int) -> Path:
        return self.pod_dir / "logs" / container / f"{restart}.log"

    def _uses_service_account_token(self) -> bool:
        for volume in self.pod["spec"].get("volumes") or []:
            for source in (volume.get("projected") or {}).get("sources") or []:
                if "serviceAccountToken" in source:
                    return True
        return False

    def _build_base_env(self) -> dict[str, str]:
        """Variables every container of the pod sees before its own ``env``."""
        node = self.node
        env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
        env.update(node.extra_env)
        env["PATH"] = os.pathsep.join([str(node.python_bin_dir), os.environ.get("PATH", "")])
        env["HOSTNAME"] = self.pod_name
        env["KUBERNETES_SERVICE_HOST"] = "127.0.0.1"
        env["KUBERNETES_SERVICE_PORT"] = str(node.control_plane.apiserver_port)
        env["KUBERNETES_SERVICE_PORT_HTTPS"] = str(node.control_plane.apiserver_port)
        env[POD_DIR_ENV] = str(self.pod_dir)
        tmp = self.pod_dir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(tmp)
        if self._uses_service_account_token():
            sa_dir = self._write_service_account_files()
            env[SERVICEACCOUNT_DIR_ENV] = str(sa_dir)
            env["KUBECONFIG"] = str(self.pod_dir / "kubeconfig")
        return env

    def _write_service_account_files(self) -> Path:
        """Request a pod-bound token and lay it out like the in-cluster mount."""
        sa = self.pod["spec"].get("serviceAccountName") or "default"
        answer = self.node.client.request(
            "POST",
            f"/api/v1/namespaces/{quote(self.namespace)}/serviceaccounts/{quote(sa)}/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "expirationSeconds": TOKEN_EXPIRATION_SECONDS,
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": self.pod_name,
                        "uid": self.uid,
                    },
                },
            },
        )
        token: str = answer["status"]["token"]
        sa_dir = self.pod_dir / "serviceaccount"
        sa_dir.mkdir(parents=True, exist_ok=True)
        (sa_dir / "token").write_text(token)
        (sa_dir / "namespace").write_text(self.namespace)
        shutil.copyfile(self.node.control_plane.ca_file, sa_dir / "ca.crt")
        write_kubeconfig(
            path=self.pod_dir / "kubeconfig",
            server=self.node.control_plane.server,
            ca_file=sa_dir / "ca.crt",
            user=f"system:serviceaccount:{self.namespace}:{sa}",
            token=token,
            token_file=sa_dir / "token",
            namespace=self.namespace,
        )
        return sa_dir

    def _container_launch(self, run: ContainerRun) -> tuple[list[str], dict[str, str], str]:
        spec = run.spec
        env = dict(self.base_env or {})
        for source in spec.get("envFrom") or []:
            env.update(self._env_from(source, run.name))
        for item in spec.get("env") or []:
            value = self._env_value(item, run.name, env)
            if value is not None:
                env[item["name"]] = value
        command = list(spec.get("command") or [])
        args = list(spec.get("args") or [])
        if not command:
            raise ContainerConfigError(
                container=run.name,
                detail="no command: the process node ignores images, so set command",
            )
        argv = [expand_references(a, env) for a in command + args]
        cwd = spec.get("workingDir")
        if not cwd or not Path(cwd).is_dir():
            work = self.pod_dir / "work"
            work.mkdir(parents=True, exist_ok=True)
            cwd = str(work)
        return argv, env, cwd

    def _env_from(self, source: dict[str, Any], container: str) -> dict[str, str]:
        prefix = source.get("prefix", "")
        for kind, key in (("configmaps", "configMapRef"), ("secrets", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            data = self._read_object_data(kind, ref["name"], container, ref.get("optional"))
            return {prefix + k: v for k, v in (data or {}).items()}
        return {}

    def _env_value(self, item: dict[str, Any], container: str, env: dict[str, str]) -> str | None:
        if "value" in item:
            return expand_references(str(item["value"]), env)
        source = item.get("valueFrom")
        if source is None:
            return ""
        if "fieldRef" in source:
            return self._field_value(source["fieldRef"]["fieldPath"], container)
        for kind, key in (("configmaps", "configMapKeyRef"), ("secrets", "secretKeyRef")):
            ref = source.get(key)
            if ref is None:
                continue
            optional = bool(ref.get("optional"))
            data = self._read_object_data(kind, ref["name"], container, optional)
            if data is None or ref["key"] not in data:
                if optional:
                    return None
                raise ContainerConfigError(
                    container=container,
                    detail=f"couldn't find key {ref['key']} in {kind[:-1]} "
                    f"{self.namespace}/{ref['name']}",
                )
            return data[ref["key"]]
        if "resourceFieldRef" in source:
            return "0"
        return ""

    def _field_value(self, path: str, container: str) -> str:
        meta = self.pod["metadata"]
        spec = self.pod["spec"]
        values: dict[str, str] = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "metadata.uid": meta["uid"],
            "spec.nodeName": spec.get("nodeName", ""),
            "spec.serviceAccountName": spec.get("serviceAccountName", ""),
            "status.podIP": POD_IP,
            "status.podIPs": POD_IP,
            "status.hostIP": POD_IP,
            "status.hostIPs": POD_IP,
        }
        if path in values:
            return values[path]
        match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if match:
            return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
        raise ContainerConfigError(container=container, detail=f"unsupported fieldPath {path}")

    def _read_object_data(
        self, kind: str, name: str, container: str, optional: bool | None
    ) -> dict[str, str] | None:
        try:
            obj = self.node.client.get(
                f"/api/v1/namespaces/{quote(self.namespace)}/{kind}/{quote(name)}"
            )
        except ApiError as exc:
            if exc.status == 404 and optional:
                return None
            raise ContainerConfigError(
                container=container, detail=f"{kind[:-1]} {self.namespace}/{name}: {exc.reason}"
            ) from None
        if kind == "secrets":
            return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        return dict(obj.get("data") or {})

    # -- status ------------------------------------------------------------------------

    def _set_condition(self, kind: str, status: str) -> None:
        old = self.conditions.get(kind)
        if old is None or old[0] != status:
            self.conditions[kind] = (status, now_rfc3339())

    def _container_status(self, run: ContainerRun) -> dict[str, Any]:
        status: dict[str, Any] = {
            "name": run.name,
            "image": run.spec.get("image") or "process",
            "imageID": "",
            "ready": run.is_ready(),
            "started": run.is_running(),
            "restartCount": run.restart_count,
            "state": run.state,
            "lastState": run.last_state,
        }
        if run.process is not None:
            status["containerID"] = f"process://{run.process.pid}"
        elif "terminated" in run.state and "containerID" in run.state["terminated"]:
            status["containerID"] = run.state["terminated"]["containerID"]
        return status

    def _status_document(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "phase": self.phase,
            "hostIP": POD_IP,
            "hostIPs": [{"ip": POD_IP}],
            "podIP": POD_IP,
            "podIPs": [{"ip": POD_IP}],
            "startTime": self.start_time,
            "conditions": [
                {"type": kind, "status": value, "lastTransitionTime": at, "lastProbeTime": None}
                for kind, (value, at) in self.conditions.items()
            ],
            "containerStatuses": [self._container_status(r) for r in self.containers],
        }
        if self.init_containers:
            status["initContainerStatuses"] = [
                self._container_status(r) for r in self.init_containers
            ]
        return status

    def _push_status(self) -> None:
        with self.lock:
            if self.forgotten:
                return
        body = {"metadata": {"uid": self.uid}, "status": self._status_document()}
        path = f"/api/v1/namespaces/{quote(self.namespace)}/pods/{quote(self.pod_name)}/status"
        for attempt in range(5):
            try:
                self.node.client.request(
                    "PATCH", path, body=body, content_type=STRATEGIC_MERGE_PATCH
                )
                return
            except ApiError as exc:
                if exc.status in (404, 409):
                    return
                self.node.log(f"pod {self.namespace}/{self.pod_name}: status patch: {exc}")
            except OSError as exc:
                self.node.log(f"pod {self.namespace}/{self.pod_name}: status patch: {exc!r}")
            time.sleep(0.2 * (attempt + 1))


class ProcessNode:
    """Registers a Node and runs the pods bound to it as local processes.

    ``python_bin_dir`` is put first on every container's ``PATH`` so ``python`` in a
    command is the test run's own interpreter (the virtualenv when there is one).
    """

    def __init__(
        self,
        *,
        control_plane: ControlPlane,
        name: str = "process-node",
        work_dir: Path | None = None,
        python_bin_dir: Path | None = None,
        extra_env: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        capacity: dict[str, str] | None = None,
        restart_backoff_initial: float = 1.0,
        restart_backoff_max: float = 10.0,
    ) -> None:
        self.control_plane = control_plane
        self.name = name
        self._owns_work_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix=f"cjob-{name}-"))
        self.pods_dir = self.work_dir / "pods"
        self.python_bin_dir = python_bin_dir or Path(sys.executable).parent
        self.extra_env = dict(extra_env or {})
        self.labels = {"type": "process", **(labels or {})}
        self.capacity = capacity or {
            "cpu": "32",
            "memory": "64Gi",
            "pods": "110",
            "ephemeral-storage": "100Gi",
        }
        self.restart_backoff_initial = restart_backoff_initial
        self.restart_backoff_max = restart_backoff_max
        self.node_log_file = self.work_dir / "process-node.log"
        self.workers: dict[str, PodWorker] = {}
        self.by_name: dict[tuple[str, str], PodWorker] = {}
        self._done_uids: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.client: RestClient
        self.kubelet_api: KubeletApiServer | None = None

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> ProcessNode:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Register the Node, start the heartbeat and the pod watch."""
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        pair = self.control_plane.issue_client_cert(
            name=f"node-{self.name}", user=f"system:node:{self.name}", groups=("system:nodes",)
        )
        self.client = RestClient(
            server=self.control_plane.server,
            ca_file=self.control_plane.ca_file,
            client_cert=pair.cert,
            client_key=pair.key,
        )
        serving = issue_cert(
            ca=self.control_plane.pki.ca,
            directory=self.control_plane.pki_dir,
            name=f"node-{self.name}-serving",
            common_name=f"system:node:{self.name}",
            server_ips=(POD_IP,),
            client=False,
        )
        self.kubelet_api = KubeletApiServer(
            source=self, cert=serving.cert, key=serving.key, client_ca=self.control_plane.ca_file
        )
        self.kubelet_api.start()
        self._register()
        self._heartbeat_once()
        for target, label in ((self._heartbeat_loop, "heartbeat"), (self._watch_loop, "watch")):
            thread = threading.Thread(target=target, name=f"{self.name}-{label}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, *, delete_node: bool = True) -> None:
        """Stop every pod process, the threads, and (by default) delete the Node."""
        self._stop.set()
        with self._lock:
            workers = list(self.workers.values())
        for worker in workers:
            worker.forget()
        for worker in workers:
            worker.finished.wait(timeout=10)
        for thread in self._threads:
            thread.join(timeout=5)
        if self.kubelet_api is not None:
            self.kubelet_api.stop()
        if delete_node:
            with contextlib.suppress(ApiError, OSError):
                self.client.request("DELETE", f"/api/v1/nodes/{quote(self.name)}")

    def log(self, message: str) -> None:
        with self._lock, self.node_log_file.open("a") as f:
            f.write(f"{now_micro()} {message}\n")

    # -- node object -------------------------------------------------------------------

    def _node_conditions(self) -> list[dict[str, Any]]:
        now = now_rfc3339()
        healthy = [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        ]
        return [
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": "process node is running",
                "lastHeartbeatTime": now,
                "lastTransitionTime": self._started_at,
            }
            for kind, status, reason in healthy
        ]

    def _node_status(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "allocatable": self.capacity,
            "conditions": self._node_conditions(),
            "addresses": [
                {"type": "InternalIP", "address": POD_IP},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {
                "kubeletEndpoint": {"Port": self.kubelet_api.port if self.kubelet_api else 0}
            },
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": os.uname().release,
                "osImage": "process node",
                "containerRuntimeVersion": "process://1",
                "kubeletVersion": "process-node",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def _register(self) -> None:
        self._started_at = now_rfc3339()
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **self.labels,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {},
            "status": self._node_status(),
        }
        try:
            self.client.request("POST", "/api/v1/nodes", body=body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            self.client.request(
                "PATCH",
                f"/api/v1/nodes/{quote(self.name)}",
                body={"metadata": {"labels": labels}},
                content_type=STRATEGIC_MERGE_PATCH,
            )
        self._patch_node_status()

    def _patch_node_status(self) -> None:
        self.client.request(
            "PATCH",
            f"/api/v1/nodes/{quote(self.name)}/status",
            body={"status": self._node_status()},
            content_type=STRATEGIC_MERGE_PATCH,
        )

    def _heartbeat_once(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{quote(self.name)}"
        spec = {
            "holderIdentity": self.name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": now_micro(),
        }
        try:
            lease = self.client.get(path)
            lease["spec"].update(spec)
            self.client.request("PUT", path, body=lease)
        except ApiError as exc:
            if exc.status != 404:
                raise
            self.client.request(
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                body={
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": "kube-node-lease"},
                    "spec": spec,
                },
            )
        self._patch_node_status()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self._heartbeat_once()
            except (ApiError, OSError) as exc:
                self.log(f"heartbeat failed: {exc!r}")

    # -- pods --------------------------------------------------------------------------

    def _pod_query(self) -> dict[str, str]:
        return {"fieldSelector": f"spec.nodeName={self.name}"}

    def _watch_loop(self) -> None:
        resource_version: str | None = None
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    listing = self.client.get("/api/v1/pods", query=self._pod_query())
                    resource_version = listing["metadata"]["resourceVersion"]
                    self._reconcile(listing["items"])
                query = {**self._pod_query(), "resourceVersion": resource_version}
                for event in self._events(query):
                    if self._stop.is_set():
                        return
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":
                        resource_version = None
                        break
                    resource_version = obj["metadata"].get("resourceVersion", resource_version)
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED":
                        self._on_deleted(obj)
                    else:
                        self._on_pod(obj)
            except (ApiError, OSError, ValueError) as exc:
                if isinstance(exc, ApiError) and exc.status == 410:
                    resource_version = None
                elif not self._stop.is_set():
                    self.log(f"pod watch failed, retrying: {exc!r}")
                    resource_version = None
                    self._stop.wait(1.0)

    def _events(self, query: dict[str, str]) -> Iterator[dict[str, Any]]:
        return self.client.watch("/api/v1/pods", query=query, timeout_seconds=60)

    def _reconcile(self, pods: list[dict[str, Any]]) -> None:
        seen = set()
        for pod in pods:
            seen.add(pod["metadata"]["uid"])
            self._on_pod(pod)
        with self._lock:
            gone = [w for uid, w in self.workers.items() if uid not in seen]
        for worker in gone:
            worker.forget()

    def _on_pod(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        with self._lock:
            worker = self.workers.get(uid)
            done = uid in self._done_uids
        if worker is not None:
            worker.update(pod)
            return
        phase = (pod.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp") and (done or phase in ("Succeeded", "Failed")):
            self._delete_now(pod)
            return
        if done or phase in ("Succeeded", "Failed") or self._stop.is_set():
            return
        worker = PodWorker(node=self, pod=pod)
        with self._lock:
            self.workers[uid] = worker
            self.by_name[(meta["namespace"], meta["name"])] = worker
        worker.update(pod)
        worker.start()
        threading.Thread(target=self._retire, args=(worker,), daemon=True).start()

    def _retire(self, worker: PodWorker) -> None:
        worker.finished.wait()
        with self._lock:
            self.workers.pop(worker.uid, None)
            self._done_uids.add(worker.uid)
        # A terminal pod deleted after it finished is removed right away.
        pod = worker.pod
        if pod["metadata"].get("deletionTimestamp") and not worker.forgotten:
            self._delete_now(pod)

    def _delete_now(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(ApiError, OSError):
            self.client.request(
                "DELETE",
                f"/api/v1/namespaces/{quote(meta['namespace'])}/pods/{quote(meta['name'])}",
                body={
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": meta["uid"]},
                },
            )

    def _on_deleted(self, pod: dict[str, Any]) -> None:
        with self._lock:
            worker = self.workers.get(pod["metadata"]["uid"])
        if worker is not None:
            worker.forget()

    # -- helpers for tests ---------------------------------------------------------------

    def worker_for(self, *, namespace: str, name: str) -> PodWorker:
        with self._lock:
            worker = self.by_name.get((namespace, name))
        if worker is None:
            raise PodNotFoundError(namespace=namespace, name=name)
        return worker

    def has_run(self, *, namespace: str, name: str) -> bool:
        """Whether a pod of that name has been started on this node."""
        with self._lock:
            return (namespace, name) in self.by_name

    def kill_pod_process(
        self,
        *,
        namespace: str,
        name: str,
        container: str | None = None,
        sig: signal.Signals = signal.SIGKILL,
    ) -> int:
        """Simulate a crash: signal the process group of the pod's running container(s).

        Returns how many processes were signalled.
        """
        return self.worker_for(namespace=namespace, name=name).kill(container=container, sig=sig)

    def pod_pids(self, *, namespace: str, name: str) -> dict[str, int]:
        """PIDs of the pod's running containers, by container name."""
        worker = self.worker_for(namespace=namespace, name=name)
        return {
            r.name: r.process.pid
            for r in worker.init_containers + worker.containers
            if r.process is not None and r.is_running()
        }

    def pod_dir(self, *, namespace: str, name: str) -> Path:
        """The per-pod directory (logs, service account files, default working dir)."""
        return self.worker_for(namespace=namespace, name=name).pod_dir

    def _container_run(
        self, *, namespace: str, name: str, container: str | None
    ) -> tuple[PodWorker, ContainerRun]:
        worker = self.worker_for(namespace=namespace, name=name)
        if container is None:
            return worker, worker.containers[0]
        for run in worker.init_containers + worker.containers:
            if run.name == container:
                return worker, run
        raise PodNotFoundError(namespace=namespace, name=f"{name}/{container}")

    def log_file(self, *, namespace: str, name: str, container: str, previous: bool) -> Path:
        """The log file of a container's current (or previous) run."""
        worker, run = self._container_run(namespace=namespace, name=name, container=container)
        restart = run.restart_count - 1 if previous else run.restart_count
        return worker.log_path(run.name, restart=max(restart, 0))

    def is_container_running(self, *, namespace: str, name: str, container: str) -> bool:
        """Whether the container's process runs or will be restarted."""
        worker, run = self._container_run(namespace=namespace, name=name, container=container)
        return not worker.finished.is_set() and not run.done

    def read_pod_log(
        self, *, namespace: str, name: str, container: str | None = None, previous: bool = False
    ) -> str:
        """The log of a container's current run (or the run before it, ``previous``).

        ``container`` may be left out for single-container pods. Logs stay readable
        after the pod is deleted.
        """
        worker, run = self._container_run(namespace=namespace, name=name, container=container)
        restart = run.restart_count - 1 if previous else run.restart_count
        path = worker.log_path(run.name, restart=max(restart, 0))
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_until_ready(self, *, timeout: float = 60.0) -> None:
        """Wait until the Node is Ready without the not-ready taint (schedulable)."""
        deadline = time.monotonic() + timeout
        while True:
            node = self.client.get(f"/api/v1/nodes/{quote(self.name)}")
            taints = [t["key"] for t in node["spec"].get("taints") or []]
            if not any(k.startswith("node.kubernetes.io/") for k in taints):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {self.name} still tainted: {taints}")
            time.sleep(0.25)

    def cleanup_work_dir(self) -> None:
        if self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
