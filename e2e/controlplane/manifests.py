"""Manifests for tests that run pods on the process node.

The image is only a label here: the process node runs the command with the host's
Python, so a ``python -c`` one-liner is a complete workload.
"""

from __future__ import annotations

from typing import Any


def python_pod(
    *,
    name: str,
    code: str,
    restart_policy: str = "Never",
    env: list[dict[str, Any]] | None = None,
    service_account: str | None = None,
    grace_seconds: int | None = None,
) -> dict[str, Any]:
    """A one-container pod whose container runs ``python -c code``."""
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "nodeSelector": {"type": "process"},
        "containers": [
            {
                "name": "main",
                "image": "checkpointed-jobs/test:latest",
                "command": ["python", "-c", code],
                "env": env or [],
            }
        ],
    }
    if service_account is not None:
        spec["serviceAccountName"] = service_account
    if grace_seconds is not None:
        spec["terminationGracePeriodSeconds"] = grace_seconds
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
