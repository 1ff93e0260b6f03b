"""kwok against the local control plane: many fake nodes, no processes.

kwok only manages Nodes that carry the ``type=kwok`` label; it marks them Ready, keeps
their leases fresh and moves pods bound to them through their phases without running
anything. The nodes carry a ``kwok.x-k8s.io/node=fake:NoSchedule`` taint so that
ordinary test pods keep landing on the process node; scale tests add the toleration
(``KWOK_TOLERATION``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from e2e.controlplane.binaries import ensure_binaries
from e2e.controlplane.controlplane import ControlPlane
from e2e.controlplane.procs import Component, free_port
from e2e.controlplane.rest import ApiError, RestClient, quote

STAGES_FILE = Path(__file__).resolve().parent / "kwok-stages.yaml"
KWOK_LABEL = {"type": "kwok"}
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
KWOK_TOLERATION = {
    "key": "kwok.x-k8s.io/node",
    "operator": "Equal",
    "value": "fake",
    "effect": "NoSchedule",
}


class KwokNodes:
    """Run kwok and create fake nodes for it to manage."""

    def __init__(self, *, control_plane: ControlPlane, bin_dir: Path | None = None) -> None:
        self.control_plane = control_plane
        self.bin_dir = bin_dir or ensure_binaries(names=("kwok",))
        self.log_file = control_plane.log_dir / "kwok.log"
        self.component: Component | None = None
        self.client = RestClient(
            server=control_plane.server,
            ca_file=control_plane.ca_file,
            client_cert=control_plane.pki_dir / "admin.crt",
            client_key=control_plane.pki_dir / "admin.key",
        )
        self.nodes: list[str] = []

    def __enter__(self) -> KwokNodes:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        kubeconfig = self.control_plane.write_client_kubeconfig(
            name="kwok", user="kwok-controller", groups=("system:masters",)
        )
        self.component = Component(
            name="kwok",
            argv=[
                str(self.bin_dir / "kwok"),
                f"--kubeconfig={kubeconfig}",
                f"--config={STAGES_FILE}",
                "--node-lease-duration-seconds=40",
                "--manage-all-nodes=false",
                "--manage-nodes-with-label-selector=type=kwok",
                "--node-ip=127.0.0.1",
                "--cidr=127.1.0.0/16",
                f"--server-address=127.0.0.1:{free_port()}",
            ],
            log_file=self.log_file,
        )
        self.component.start()
        self.control_plane.components.append(self.component)

    def stop(self) -> None:
        for name in list(self.nodes):
            self.delete_node(name=name)
        if self.component is not None:
            self.component.stop()
            if self.component in self.control_plane.components:
                self.control_plane.components.remove(self.component)
            self.component = None

    def add_node(
        self,
        *,
        name: str,
        capacity: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        wait: bool = True,
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Create a fake node and (by default) wait until kwok reports it Ready."""
        cap = capacity or {"cpu": "32", "memory": "256Gi", "pods": "110"}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {**KWOK_LABEL, "kubernetes.io/hostname": name, **(labels or {})},
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "spec": {"taints": [KWOK_TAINT]},
            "status": {"capacity": cap, "allocatable": cap},
        }
        node: dict[str, Any] = self.client.request("POST", "/api/v1/nodes", body=body)
        self.nodes.append(name)
        if wait:
            node = self.wait_ready(name=name, timeout=timeout)
        return node

    def wait_ready(self, *, name: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            if self.component is not None:
                self.component.check_running()
            node: dict[str, Any] = self.client.get(f"/api/v1/nodes/{quote(name)}")
            for cond in (node.get("status") or {}).get("conditions") or []:
                if cond["type"] == "Ready" and cond["status"] == "True":
                    return node
            if time.monotonic() > deadline:
                raise TimeoutError(f"kwok node {name} not Ready after {timeout:.0f}s")
            time.sleep(0.25)

    def delete_node(self, *, name: str) -> None:
        try:
            self.client.request("DELETE", f"/api/v1/nodes/{quote(name)}")
        except ApiError as exc:
            if exc.status != 404:
                raise
        if name in self.nodes:
            self.nodes.remove(name)
