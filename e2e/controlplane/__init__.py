"""A real Kubernetes control plane for tests, built from Go modules, without Docker.

``ControlPlane`` runs etcd, kube-apiserver, kube-scheduler and kube-controller-manager
on loopback; ``ProcessNode`` stands in for a kubelet and runs pods as local
processes; ``KwokNodes`` adds fake nodes for scale tests. See ``README.md``.
"""

from e2e.controlplane.binaries import ensure_binaries, find_bin_dir, read_versions
from e2e.controlplane.controlplane import ControlPlane
from e2e.controlplane.kwok import KWOK_TOLERATION, KwokNodes
from e2e.controlplane.process_node import ProcessNode
from e2e.controlplane.rest import ApiError, RestClient

__all__ = [
    "KWOK_TOLERATION",
    "ApiError",
    "ControlPlane",
    "KwokNodes",
    "ProcessNode",
    "RestClient",
    "ensure_binaries",
    "find_bin_dir",
    "read_versions",
]
