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

This module is the node itself: it registers (:mod:`~e2e.controlplane.node_registration`),
watches the pods bound to it and hands each to a
:class:`~e2e.controlplane.pod_worker.PodWorker`, and answers the tests' questions
about them (logs, process ids, a simulated crash). What a container starts with is
:mod:`~e2e.controlplane.container_launch`; what the node reports,
:mod:`~e2e.controlplane.pod_status`.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from e2e.controlplane.container_run import ContainerRun
from e2e.controlplane.controlplane import ControlPlane
from e2e.controlplane.kubelet_api import KubeletApiServer
from e2e.controlplane.node_registration import HEARTBEAT_SECONDS, NodeRegistration
from e2e.controlplane.pki import issue_cert
from e2e.controlplane.pod_status import POD_IP
from e2e.controlplane.pod_worker import PodWorker
from e2e.controlplane.rest import ApiError, RestClient, quote
from e2e.controlplane.timestamps import now_micro

NODE_DELETE_SECONDS = 30.0
"""How long a stopping node tries to delete its Node before it says it could not."""


class PodNotFoundError(LookupError):
    """Raised when a helper is asked about a pod this node never ran."""

    def __init__(self, *, namespace: str, name: str) -> None:
        self.namespace = namespace
        self.name = name
        super().__init__(f"pod {namespace}/{name} has not run on this process node")


class NodeClient(RestClient):
    """The node's client to the API server, which a test can cut off (:attr:`cut_off`):
    every request then fails as over a broken network, while the pods' processes
    run on."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cut_off = threading.Event()

    def _open(self, method: str, path: str, **kwargs: Any) -> Any:
        if self.cut_off.is_set():
            raise OSError(f"{method} {path}: the node is cut off from the API server")
        return super()._open(method, path, **kwargs)


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
        self.client: NodeClient
        self.kubelet_api: KubeletApiServer | None = None
        self._registration: NodeRegistration

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
        self.client = NodeClient(
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
        self._registration = NodeRegistration(
            client=self.client,
            name=self.name,
            labels=self.labels,
            capacity=self.capacity,
            kubelet_port=self.kubelet_api.port,
        )
        self._registration.register()
        self._registration.heartbeat()
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
            self._delete_node()

    def _delete_node(self) -> None:
        """Delete the Node as an administrator and wait until it is gone.

        A stopped node's Node must not outlive it: the scheduler would go on binding
        pods to it until the cluster saw it silent (40 s), and each such pod would
        never start (a later test's driver, lost with its node). The node's own
        credentials may not delete a Node, so the administrator's do; what still fails
        after :data:`NODE_DELETE_SECONDS` is raised, not hidden.
        """
        admin = self.control_plane.admin_rest()
        path = f"/api/v1/nodes/{quote(self.name)}"
        deadline = time.monotonic() + NODE_DELETE_SECONDS
        while True:
            try:
                admin.request("DELETE", path)
                admin.get(path)
            except ApiError as exc:
                if exc.status == 404:
                    self.log("Node deleted")
                    return
                problem: Exception = exc
            except OSError as exc:
                problem = exc
            else:
                problem = RuntimeError("still there after its deletion")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Node {self.name} could not be deleted within "
                                   f"{NODE_DELETE_SECONDS:.0f} s: {problem}")
            time.sleep(0.5)

    def partition(self) -> None:
        """Cut the node off from the API server, as a broken network or a hung kubelet
        would: no heartbeat, pod status or watch gets through, and the pods' processes
        run on, unseen, until :meth:`heal`."""
        self.log("partitioned from the API server")
        self.client.cut_off.set()

    def heal(self) -> None:
        """Reconnect: the node lists its pods again, and stops those deleted meanwhile."""
        self.client.cut_off.clear()
        self.log("reconnected to the API server")

    def log(self, message: str) -> None:
        with self._lock, self.node_log_file.open("a") as f:
            f.write(f"{now_micro()} {message}\n")

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self._registration.heartbeat()
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
                    if self.client.cut_off.is_set():
                        # A stream opened before the partition: what it says now
                        # would not reach a partitioned node. Read again after heal().
                        raise OSError("the node is cut off from the API server")
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
