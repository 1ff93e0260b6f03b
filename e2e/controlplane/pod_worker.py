"""One pod on the process node, from its first container start to its deletion.

A :class:`PodWorker` thread runs the init containers in order, then the main ones;
restarts them by the pod's ``restartPolicy`` with the kubelet's doubling back-off;
runs exec readiness probes; derives the phase and conditions and patches them onto
the Pod; and on deletion sends SIGTERM, waits the grace period, then SIGKILL, and
removes the Pod for good. Each container runs in a process group of its own, its
output in a log file per run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from e2e.controlplane.container_launch import ContainerConfigError, PodLauncher
from e2e.controlplane.container_run import ContainerRun, terminated_state
from e2e.controlplane.pod_host import PodHost
from e2e.controlplane.pod_status import pod_status
from e2e.controlplane.rest import STRATEGIC_MERGE_PATCH, ApiError, quote
from e2e.controlplane.timestamps import now_rfc3339

TERMINATION_LOG_LINES = 80
TERMINATION_LOG_BYTES = 2048
TERMINATION_MESSAGE_BYTES = 4096
"""The kubelet's limit for a termination message file."""
"""The kubelet's limits for a termination message taken from the log."""


class PodWorker(threading.Thread):
    """Runs one pod (identified by its UID) from start to termination."""

    def __init__(self, *, node: PodHost, pod: dict[str, Any]) -> None:
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
        self.launcher = PodLauncher(node=node, namespace=self.namespace, pod_name=self.pod_name,
                                    uid=self.uid, pod_dir=self.pod_dir)

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
                self.base_env = self.launcher.base_env(pod=self.pod)
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
        terminated = terminated_state(run, proc)
        code: int = terminated["exitCode"]
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
            argv, env, cwd = self.launcher.launch(run, pod=self.pod, base_env=self.base_env)
        except (ContainerConfigError, ApiError) as exc:
            self._config_error([run], str(exc))
            run.next_start = time.monotonic() + 2.0
            return True
        if run.restart_pending:
            run.restart_pending = False
            run.restart_count += 1
        log_file = self.log_path(run.name, restart=run.restart_count)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        argv = self._termination_file(run, argv)
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
        except OSError as exc:  # the node is cut off: its pods' ends stay unreported
            self.node.log(f"pod {self.namespace}/{self.pod_name}: final delete: {exc!r}")

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
        terminated = terminated_state(run, proc)
        run.state = {"terminated": terminated}
        run.process = None
        run.done = True
        run.succeeded = terminated["exitCode"] == 0

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

    def _termination_file(self, run: ContainerRun, argv: list[str]) -> list[str]:
        """The kubelet mounts an empty file at the container's ``terminationMessagePath``;
        a host process has no mount of its own, so an argument naming that path is
        pointed at a file of the pod's instead, which is read when the process ends."""
        path = run.spec.get("terminationMessagePath")
        if not isinstance(path, str) or path not in argv[1:]:
            run.termination_file = None
            return argv
        host = self.pod_dir / "termination" / f"{run.name}-{run.restart_count}"
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_bytes(b"")
        run.termination_file = host
        return [argv[0], *(str(host) if arg == path else arg for arg in argv[1:])]

    def _termination_message(self, run: ContainerRun, *, code: int) -> str | None:
        """The termination message file's content, as the kubelet reads it; else, with
        ``terminationMessagePolicy: FallbackToLogsOnError``, a failed container's message
        is the tail of its log."""
        if run.termination_file is not None:
            try:
                written = run.termination_file.read_bytes()[:TERMINATION_MESSAGE_BYTES]
            except OSError:
                written = b""
            if written:
                return written.decode("utf-8", "replace")
        if code == 0 or run.spec.get("terminationMessagePolicy") != "FallbackToLogsOnError":
            return None
        try:
            data = self.log_path(run.name, restart=run.restart_count).read_bytes()
        except OSError:
            return None
        lines = data.decode("utf-8", "replace").splitlines()[-TERMINATION_LOG_LINES:]
        text = "\n".join(lines)
        return text[-TERMINATION_LOG_BYTES:] or None

    # -- logs ------------------------------------------------------------------------

    def log_path(self, container: str, *, restart: int) -> Path:
        return self.pod_dir / "logs" / container / f"{restart}.log"

    # -- status ------------------------------------------------------------------------

    def _set_condition(self, kind: str, status: str) -> None:
        old = self.conditions.get(kind)
        if old is None or old[0] != status:
            self.conditions[kind] = (status, now_rfc3339())

    def _push_status(self) -> None:
        with self.lock:
            if self.forgotten:
                return
        status = pod_status(phase=self.phase, start_time=self.start_time,
                            conditions=self.conditions, containers=self.containers,
                            init_containers=self.init_containers)
        body = {"metadata": {"uid": self.uid}, "status": status}
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

