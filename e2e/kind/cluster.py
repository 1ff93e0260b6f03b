"""A kind cluster on the private engine, as the kind scenarios use it.

:func:`cluster_config` is the kind configuration: one control-plane node that also
runs the workloads (and, for the node-loss run, worker nodes beside it), plus two
settings some hosts need and others ignore (the kubelet accepts cgroup v1,
containerd does not lower ``oom_score_adj``), and with the node image built here,
the kubeadm settings naming its images. :class:`KindCluster` creates and deletes the
cluster, loads image archives into the node (``kind load image-archive``), kills a
pod's container through the node's own ``ctr`` (the kill hook of the scenarios),
freezes and resumes a worker node, and routes the cluster's Service and pod ranges
from the host to the node, so the host reaches an S3 Service or a driver's metrics at the same
addresses a real node's host does. The engine's record in the host lease names the
cluster before kind creates it, and each route (with the routes it replaces) before it
is set, so a killed run's cluster and routes are undone by the next run
(``engine_record.py``); :meth:`KindCluster.delete` puts the routes back and deletes
the cluster step by step.
"""

from __future__ import annotations

import base64
import functools
import json
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.controlplane.nodes import cordon
from e2e.controlplane.rest import RestClient
from e2e.kind.engine import DockerEngine, EngineError
from e2e.kind.node_image import KUBEADM_PATCH
from e2e.kind.routes import SavedRoute, restore_route, save_route, set_route
from e2e.realnode.host import Teardown
from e2e.realnode.node import ImageArchive

Log = Callable[[str], None]

#: kind's defaults, routed from the host to the node.
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"

KUBELET_PATCH = """\
kind: KubeletConfiguration
failCgroupV1: false
"""
#: The node image's bridge network (``node/files/etc/cni/net.d/``) and its one range.
CNI_CONFIG = "/etc/cni/net.d/10-cjob-bridge.conflist"
SINGLE_NODE_RANGE = "10.244.0.0/24"
#: kind's own node images run containerd with a version 2 configuration.
CONTAINERD_PATCH = """\
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
"""


def cluster_config(*, local_image: bool, workers: int = 0) -> dict[str, Any]:
    """The kind configuration of the scenarios (``local_image``: the node image built
    here, whose control plane images carry the project's names; ``workers``: nodes
    beside the control plane's)."""
    patches = [KUBELET_PATCH]
    if local_image:
        patches.append(KUBEADM_PATCH)
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "nodes": [{"role": "control-plane"}] + [{"role": "worker"}] * workers,
        "kubeadmConfigPatches": patches,
        "containerdConfigPatches": [CONTAINERD_PATCH],
    }


@dataclass
class KindCluster:
    """A kind cluster: create, load images, kill containers, stop nodes, delete.

    With ``workers`` the control-plane node keeps running workloads too (kind would
    taint it), so that a job can move to it when a worker stops; the cluster's DNS
    server is kept on it, since a stopped worker must not take the cluster's names
    with it."""

    name: str
    engine: DockerEngine
    kind: Path
    bin_dir: Path
    node_image: str
    local_image: bool = True
    workers: int = 0
    runtime_image: str = ""
    operator_image: str = ""
    log: Log = lambda _: None
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cjob-kind-")))
    _routes: list[SavedRoute] = field(default_factory=list)

    @property
    def node(self) -> str:
        return f"{self.name}-control-plane"

    @property
    def worker_nodes(self) -> list[str]:
        """kind's names of the worker nodes: ``<name>-worker``, ``<name>-worker2``, …"""
        return [f"{self.name}-worker{'' if i == 1 else i}" for i in range(1, self.workers + 1)]

    @property
    def kubeconfig(self) -> Path:
        return self.work_dir / "kubeconfig"

    def _kind(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.kind), *args], env=self.engine.env(), text=True,
                              capture_output=True, timeout=timeout, check=False)  # fmt: skip
        if proc.returncode != 0:
            raise EngineError(f"kind {' '.join(args[:2])} failed:\n{proc.stderr[-4000:]}")
        return proc

    def create(self) -> None:
        config = self.work_dir / "cluster.yaml"
        config.write_text(yaml.safe_dump(cluster_config(local_image=self.local_image,
                                                        workers=self.workers)))
        self.log(f"kind create cluster {self.name} ({self.node_image})")
        self.engine.remember_cluster(self.name)
        self._kind("create", "cluster", "--name", self.name, "--image", self.node_image,
                   "--config", str(config), "--kubeconfig", str(self.kubeconfig),
                   "--wait", "180s")  # fmt: skip
        self._route_to_node()
        # One DNS server is enough, and its CPU request goes to the jobs.
        self.node_kubectl("scale", "deployment", "coredns", "--namespace", "kube-system",
                          "--replicas", "1")  # fmt: skip
        if self.workers:
            self._connect_pod_networks()
            self.node_kubectl("taint", "nodes", self.node,
                              "node-role.kubernetes.io/control-plane:NoSchedule-")
            pin = {"spec": {"template": {"spec": {
                "nodeSelector": {"kubernetes.io/hostname": self.node}}}}}
            self.node_kubectl("patch", "deployment", "coredns", "--namespace", "kube-system",
                              "--patch", json.dumps(pin))  # fmt: skip
            self.node_kubectl("rollout", "status", "deployment", "coredns", "--namespace",
                              "kube-system", "--timeout", "180s")  # fmt: skip

    def _connect_pod_networks(self) -> None:
        """Give each node's pods the node's own pod range, and each node a route to the
        others' ranges through their addresses on kind's network.

        The node image's bridge network holds one range (kind's own network plugin is
        not in it), which on several nodes would hand out the same addresses twice
        with no way between them. Done before any pod but the host-network ones runs
        on a worker (the cluster's DNS server moves to the control-plane node next)."""
        names = [self.node, *self.worker_nodes]
        nodes = {n["metadata"]["name"]: n for n in self.rest().get("/api/v1/nodes")["items"]}
        ranges = {name: str(nodes[name]["spec"]["podCIDR"]) for name in names}
        addresses = {name: self.node_ip(name) for name in names}
        for name in names:
            config = self.engine.docker("exec", name, "cat", CNI_CONFIG).stdout
            self.engine.docker("exec", "-i", name, "sh", "-c", f"cat > {CNI_CONFIG}",
                               stdin=config.replace(SINGLE_NODE_RANGE,
                                                    ranges[name]).encode())  # fmt: skip
            for other in names:
                if other != name:
                    self.engine.docker("exec", name, "ip", "route", "replace", ranges[other],
                                       "via", addresses[other])  # fmt: skip
        self.log(f"pod ranges {ranges}, routed between the nodes")

    def node_kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """kubectl in the control-plane node, as the cluster's admin."""
        return self.engine.docker("exec", self.node, "kubectl", "--kubeconfig",
                                  "/etc/kubernetes/admin.conf", *args)  # fmt: skip

    def cordon(self, node: str, *, unschedulable: bool = True) -> None:
        """``kubectl cordon`` (or, with ``unschedulable=False``, ``uncordon``) ``node``."""
        cordon(self.rest(), node, unschedulable=unschedulable)

    def pause_node(self, node: str) -> None:
        """Freeze every process of ``node`` (its kubelet, containerd, pods) at once, as
        a machine that hangs or drops off the network stops: the API server hears
        nothing more from it, and nothing on it runs until :meth:`resume_node`."""
        self.engine.docker("pause", node)

    def resume_node(self, node: str) -> None:
        """Let a paused node's processes run on from where they stopped."""
        self.engine.docker("unpause", node)

    def delete(self) -> list[str]:
        """Put the routes back and delete the cluster, each step whatever the others
        did; return (and log) what could not be undone."""
        teardown = Teardown(log=self.log)
        for route in self._routes:
            teardown.step(f"route {route.destination}", functools.partial(restore_route, route))
        self._routes = []
        teardown.step("kind delete cluster", self._delete_cluster)
        return teardown.finish()

    def _delete_cluster(self) -> list[str]:
        proc = subprocess.run([str(self.kind), "delete", "cluster", "--name", self.name],
                              env=self.engine.env(), capture_output=True, text=True,
                              check=False, timeout=300)  # fmt: skip
        if proc.returncode == 0:
            return []
        return [proc.stderr.strip()[-2000:] or f"kind exited with status {proc.returncode}"]

    def node_ip(self, node: str = "") -> str:
        """The address on kind's network of ``node`` (the control-plane node's by default)."""
        fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
        return self.engine.docker("inspect", "--format", fmt,
                                  node or self.node).stdout.strip()  # fmt: skip

    def _route_to_node(self) -> None:
        """Route the Service and pod ranges to the node, each saved (with the routes it
        replaces) into the engine's record before it is set."""
        via = self.node_ip()
        for cidr in (SERVICE_CIDR, POD_CIDR):
            route = save_route(destination=cidr, via=via)
            self.engine.remember_route(route)
            self._routes.append(route)
            set_route(route)

    def rest(self) -> RestClient:
        """A REST client as the cluster's admin (kind's kubeconfig holds the
        certificates inline; the client reads files)."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        files = {}
        for name, data in (("ca.crt", cluster["certificate-authority-data"]),
                           ("admin.crt", user["client-certificate-data"]),
                           ("admin.key", user["client-key-data"])):  # fmt: skip
            path = self.work_dir / name
            if not path.exists():
                path.write_bytes(base64.b64decode(data))
                path.chmod(0o600)
            files[name] = path
        return RestClient(server=cluster["server"], ca_file=files["ca.crt"],
                          client_cert=files["admin.crt"], client_key=files["admin.key"])  # fmt: skip

    def import_image(self, archive: ImageArchive, *, nodes: list[str] | None = None) -> None:
        """``kind load image-archive``: the archive into the containerd of ``nodes``
        (every node unless given)."""
        self.log(f"kind load image-archive {archive.path.name} ({archive.tag})")
        only = ["--nodes", ",".join(nodes)] if nodes else []
        self._kind("load", "image-archive", str(archive.path), "--name", self.name, *only,
                   timeout=1200)  # fmt: skip

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``ctr`` in the node, namespace ``k8s.io``."""
        return self.engine.docker("exec", self.node, "ctr", "-n", "k8s.io", *args,
                                  check=False, timeout=120)  # fmt: skip

    def kill_container(self, pod: dict[str, Any]) -> None:
        from e2e.realnode.scenario import kill_container

        kill_container(self.ctr, pod)

    def logs(self) -> str:
        """The node's kubelet and containerd journal, for a failure report."""
        proc = self.engine.docker("exec", self.node, "journalctl", "--no-pager", "-u",
                                  "kubelet", "-u", "containerd", "-n", "400",
                                  check=False)  # fmt: skip
        return proc.stdout + proc.stderr
