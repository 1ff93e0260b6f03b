"""A one-node kind cluster on the private engine, as the kind scenarios use it.

:func:`cluster_config` is the kind configuration: one control-plane node that also
runs the workloads, plus two settings some hosts need and others ignore (the kubelet
accepts cgroup v1, containerd does not lower ``oom_score_adj``), and with the node
image built here, the kubeadm settings naming its images. :class:`KindCluster`
creates and deletes the cluster, loads image archives into the node (``kind load
image-archive``), kills a pod's container through the node's own ``ctr`` (the kill
hook of the scenarios), and routes the cluster's Service and pod ranges from the host
to the node, so the host reaches an S3 Service or a driver's metrics at the same
addresses a real node's host does. The engine's record in the host lease names the
cluster before kind creates it, and each route (with the routes it replaces) before it
is set, so a killed run's cluster and routes are undone by the next run
(``engine_record.py``); :meth:`KindCluster.delete` puts the routes back and deletes
the cluster step by step.
"""

from __future__ import annotations

import base64
import functools
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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
#: kind's own node images run containerd with a version 2 configuration.
CONTAINERD_PATCH = """\
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
"""


def cluster_config(*, local_image: bool) -> dict[str, Any]:
    """The kind configuration of the scenarios (``local_image``: the node image built
    here, whose control plane images carry the project's names)."""
    patches = [KUBELET_PATCH]
    if local_image:
        patches.append(KUBEADM_PATCH)
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "nodes": [{"role": "control-plane"}],
        "kubeadmConfigPatches": patches,
        "containerdConfigPatches": [CONTAINERD_PATCH],
    }


@dataclass
class KindCluster:
    """A kind cluster of one node: create, load images, kill containers, delete."""

    name: str
    engine: DockerEngine
    kind: Path
    bin_dir: Path
    node_image: str
    local_image: bool = True
    runtime_image: str = ""
    operator_image: str = ""
    log: Log = lambda _: None
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cjob-kind-")))
    _routes: list[SavedRoute] = field(default_factory=list)

    @property
    def node(self) -> str:
        return f"{self.name}-control-plane"

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
        config.write_text(yaml.safe_dump(cluster_config(local_image=self.local_image)))
        self.log(f"kind create cluster {self.name} ({self.node_image})")
        self.engine.remember_cluster(self.name)
        self._kind("create", "cluster", "--name", self.name, "--image", self.node_image,
                   "--config", str(config), "--kubeconfig", str(self.kubeconfig),
                   "--wait", "180s")  # fmt: skip
        self._route_to_node()
        # One node: one DNS server is enough, and its CPU request goes to the jobs.
        self.engine.docker("exec", self.node, "kubectl", "--kubeconfig",
                           "/etc/kubernetes/admin.conf", "scale", "deployment", "coredns",
                           "--namespace", "kube-system", "--replicas", "1")  # fmt: skip

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

    def node_ip(self) -> str:
        fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
        return self.engine.docker("inspect", "--format", fmt, self.node).stdout.strip()

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

    def import_image(self, archive: ImageArchive) -> None:
        """``kind load image-archive``: the archive into the node's containerd."""
        self.log(f"kind load image-archive {archive.path.name} ({archive.tag})")
        self._kind("load", "image-archive", str(archive.path), "--name", self.name,
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
