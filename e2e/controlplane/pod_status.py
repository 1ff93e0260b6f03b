"""What the process node reports of a pod: the ``status`` it patches onto the Pod."""

from __future__ import annotations

from typing import Any

from e2e.controlplane.container_run import ContainerRun

POD_IP = "127.0.0.1"
"""The node's and every pod's address: pods share the host's network."""


def container_status(run: ContainerRun) -> dict[str, Any]:
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


def pod_status(
    *,
    phase: str,
    start_time: str,
    conditions: dict[str, tuple[str, str]],
    containers: list[ContainerRun],
    init_containers: list[ContainerRun],
) -> dict[str, Any]:
    """The pod's ``status``: ``conditions`` maps a type to its status and transition time."""
    status: dict[str, Any] = {
        "phase": phase,
        "hostIP": POD_IP,
        "hostIPs": [{"ip": POD_IP}],
        "podIP": POD_IP,
        "podIPs": [{"ip": POD_IP}],
        "startTime": start_time,
        "conditions": [
            {"type": kind, "status": value, "lastTransitionTime": at, "lastProbeTime": None}
            for kind, (value, at) in conditions.items()
        ],
        "containerStatuses": [container_status(r) for r in containers],
    }
    if init_containers:
        status["initContainerStatuses"] = [
            container_status(r) for r in init_containers
        ]
    return status
