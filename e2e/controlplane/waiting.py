"""Polling helpers for tests against the local control plane.

Tests wait for observable outcomes (a phase, an exit code, an object being gone)
with a generous deadline and never assert how long something took.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from e2e.controlplane.rest import ApiError, RestClient, quote

T = TypeVar("T")


class WaitTimeoutError(AssertionError):
    """Raised when a condition is not met before the deadline."""

    def __init__(self, *, what: str, timeout: float, last: object) -> None:
        self.what = what
        self.timeout = timeout
        self.last = last
        super().__init__(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")


def wait_for(
    check: Callable[[], T | None], *, what: str, timeout: float = 60.0, interval: float = 0.2
) -> T:
    """Call ``check`` until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = check()
        except ApiError as exc:
            value, last = None, exc
        if value:
            return value
        if value is not None:
            last = value
        if time.monotonic() > deadline:
            raise WaitTimeoutError(what=what, timeout=timeout, last=last)
        time.sleep(interval)


def get_pod(client: RestClient, *, namespace: str, name: str) -> dict[str, Any] | None:
    """The pod as a dict, or ``None`` when it does not exist."""
    try:
        pod: dict[str, Any] = client.get(
            f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
        )
        return pod
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def wait_for_pod_phase(
    client: RestClient,
    *,
    namespace: str,
    name: str,
    phases: tuple[str, ...],
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Wait until the pod's ``status.phase`` is one of ``phases``; return the pod."""

    def check() -> dict[str, Any] | None:
        pod = get_pod(client, namespace=namespace, name=name)
        if pod is not None and (pod.get("status") or {}).get("phase") in phases:
            return pod
        return None

    return wait_for(check, what=f"pod {namespace}/{name} in {phases}", timeout=timeout)


def wait_for_pod_gone(
    client: RestClient, *, namespace: str, name: str, timeout: float = 60.0
) -> None:
    """Wait until the pod object no longer exists."""
    wait_for(
        lambda: get_pod(client, namespace=namespace, name=name) is None,
        what=f"pod {namespace}/{name} to be deleted",
        timeout=timeout,
    )


def pod_condition(pod: dict[str, Any], kind: str) -> str | None:
    """The status (``"True"``, ``"False"``...) of the pod's condition ``kind``, if it has one."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def pod_is_ready(pod: dict[str, Any] | None) -> bool:
    """Whether the pod's Ready condition is True (its readiness probes pass)."""
    return pod is not None and pod_condition(pod, "Ready") == "True"


def container_state(pod: dict[str, Any], *, container: str | None = None) -> dict[str, Any]:
    """The ``state`` of a container (the first one when ``container`` is omitted)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for status in statuses:
        if container is None or status["name"] == container:
            state: dict[str, Any] = status.get("state") or {}
            return state
    return {}


def plural_of(kind: str) -> str:
    """The resource name of a kind, by the English rules Kubernetes uses for its types."""
    lower = kind.lower()
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    return lower + "s"


def create_objects(client: RestClient, *, namespace: str, objects: list[dict[str, Any]]) -> None:
    """Create namespaced objects from manifests, in order (create only, no apply)."""
    for obj in objects:
        api_version: str = obj["apiVersion"]
        plural = plural_of(obj["kind"])
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        client.request("POST", f"{base}/namespaces/{quote(namespace)}/{plural}", body=obj)
