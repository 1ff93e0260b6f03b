"""What a pod's worker and its container launcher need of the node that runs them.

The process node (``process_node.ProcessNode``) hands each pod to a worker
(``pod_worker``), which starts the containers through a launcher
(``container_launch``). Both read a few things of the node: its client to the API
server, where pods live on disk, the environment it passes on, its restart back-off
and its log. Naming that here, rather than the node's class, keeps the worker and
the launcher below the node, with no import back up to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from e2e.controlplane.controlplane import ControlPlane
from e2e.controlplane.rest import RestClient


class PodHost(Protocol):
    @property
    def control_plane(self) -> ControlPlane: ...

    @property
    def client(self) -> RestClient:
        """The node's client to the API server (one a test can cut off)."""
        ...

    @property
    def pods_dir(self) -> Path: ...

    @property
    def python_bin_dir(self) -> Path: ...

    @property
    def extra_env(self) -> dict[str, str]: ...

    @property
    def restart_backoff_initial(self) -> float: ...

    @property
    def restart_backoff_max(self) -> float: ...

    def log(self, message: str) -> None: ...
