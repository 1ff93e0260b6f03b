"""One container of a pod on the process node: its process, its state as the API shows
it, and how an exited process becomes a ``terminated`` state."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.controlplane.timestamps import now_rfc3339


def exit_code_of(returncode: int) -> tuple[int, int | None]:
    """Map ``Popen.returncode`` to a container exit code and signal, as a shell would."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


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
    termination_file: Path | None = None
    """The host file standing in for the container's ``terminationMessagePath``."""

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


def terminated_state(run: ContainerRun, process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The ``terminated`` state of ``run`` once ``process`` (its last one) exited."""
    code, sig = exit_code_of(process.returncode)
    terminated: dict[str, Any] = {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": run.started_at,
        "finishedAt": now_rfc3339(),
        "containerID": f"process://{process.pid}",
    }
    if sig is not None:
        terminated["signal"] = sig
    return terminated
