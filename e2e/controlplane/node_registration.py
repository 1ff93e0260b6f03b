"""The Node object of a process node: its registration, status and heartbeat Lease.

The node controller marks a Node not ready (and taints it) when its Lease is not
renewed within ``leaseDurationSeconds``; the heartbeat renews it well before.
"""

from __future__ import annotations

import os
from typing import Any

from e2e.controlplane.pod_status import POD_IP
from e2e.controlplane.rest import STRATEGIC_MERGE_PATCH, ApiError, RestClient, quote
from e2e.controlplane.timestamps import now_micro, now_rfc3339

LEASE_DURATION_SECONDS = 40
HEARTBEAT_SECONDS = 10.0


class NodeRegistration:
    """Registers the Node as ``client`` (``system:node:<name>``) and keeps it Ready."""

    def __init__(
        self,
        *,
        client: RestClient,
        name: str,
        labels: dict[str, str],
        capacity: dict[str, str],
        kubelet_port: int,
    ) -> None:
        self.client = client
        self.name = name
        self.labels = labels
        self.capacity = capacity
        self.kubelet_port = kubelet_port
        self._started_at = now_rfc3339()
        """The Ready condition's transition time: when this node came up."""

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
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port}},
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

    def register(self) -> None:
        """Create the Node (or take over one of the same name) with a Ready status."""
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

    def heartbeat(self) -> None:
        """Renew the node's Lease (creating it if missing) and refresh its status."""
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
