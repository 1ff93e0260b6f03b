"""Reading pods as the API server returns them into the lifecycle's observations.

``observe_driver_pod`` and ``observe_cleanup_pod`` turn a pod (a camelCase mapping, as
kopf delivers it) into a :class:`~cjob_lifecycle.observed.DriverPod` or a
:class:`~cjob_lifecycle.observed.CleanupPod`, the terms ``plan`` decides in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cjob_lifecycle.observed import POD_PHASES, CleanupPod, DriverPod
from cjob_spec.names import ANNOTATION_SPEC_HASH, LABEL_ATTEMPT, LABEL_ROLE, ROLE_STANDBY
from cjob_spec.times import parse_time

DRIVER_CONTAINER = "driver"
CLEANUP_CONTAINER = "cleanup"
ROLE_CLEANUP = "cleanup"


@dataclass(frozen=True)
class _PodState:
    """The fields both kinds of pod are judged by."""

    name: str
    phase: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    exit_code: int | None
    reason: str | None
    message: str | None
    deletion_timestamp: datetime | None


def _pod_state(pod: Mapping[str, Any], *, container_name: str) -> _PodState | None:
    metadata = _mapping(pod.get("metadata"))
    status = _mapping(pod.get("status"))
    name = metadata.get("name")
    if not isinstance(name, str):
        return None
    phase = status.get("phase")
    if phase not in POD_PHASES:
        phase = "Pending"
    container = _container_status(status, container_name)
    state = _mapping(container.get("state"))
    running = _mapping(state.get("running"))
    terminated = _mapping(state.get("terminated"))
    waiting = _mapping(state.get("waiting"))
    exit_code = terminated.get("exitCode")
    reason = (
        _text(terminated.get("reason"))
        or _text(status.get("reason"))
        or _text(waiting.get("reason"))
    )
    message = (
        _text(terminated.get("message"))
        or _text(status.get("message"))
        or _text(waiting.get("message"))
    )
    return _PodState(
        name=name,
        phase=str(phase),
        created_at=_time(metadata.get("creationTimestamp")) or datetime.fromtimestamp(0, UTC),
        started_at=_time(running.get("startedAt")) or _time(terminated.get("startedAt")),
        finished_at=_time(terminated.get("finishedAt")),
        exit_code=exit_code if isinstance(exit_code, int) else None,
        reason=reason,
        message=message,
        deletion_timestamp=_time(metadata.get("deletionTimestamp")),
    )


def observe_driver_pod(pod: Mapping[str, Any]) -> DriverPod | None:
    """Read a driver pod manifest; ``None`` if it is not one of ours (no attempt label)."""
    metadata = _mapping(pod.get("metadata"))
    labels = _mapping(metadata.get("labels"))
    annotations = _mapping(metadata.get("annotations"))
    attempt_text = labels.get(LABEL_ATTEMPT)
    if not isinstance(attempt_text, str) or not attempt_text.isdigit():
        return None
    state = _pod_state(pod, container_name=DRIVER_CONTAINER)
    if state is None:
        return None
    spec_hash = annotations.get(ANNOTATION_SPEC_HASH)
    standby = labels.get(LABEL_ROLE) == ROLE_STANDBY
    return DriverPod(
        name=state.name,
        attempt=int(attempt_text),
        phase=state.phase,
        created_at=state.created_at,
        started_at=state.started_at,
        finished_at=state.finished_at,
        exit_code=state.exit_code,
        reason=state.reason,
        message=state.message,
        deletion_timestamp=state.deletion_timestamp,
        spec_hash=spec_hash if isinstance(spec_hash, str) else None,
        standby=standby,
        ready=standby and _condition(pod, "Ready"),
    )


def observe_cleanup_pod(pod: Mapping[str, Any]) -> CleanupPod | None:
    """Read a cleanup pod manifest; ``None`` unless its role label says ``cleanup``."""
    labels = _mapping(_mapping(pod.get("metadata")).get("labels"))
    if labels.get(LABEL_ROLE) != ROLE_CLEANUP:
        return None
    state = _pod_state(pod, container_name=CLEANUP_CONTAINER)
    if state is None:
        return None
    # The cleanup command's outcome is its last line; a message taken from the log
    # (terminationMessagePolicy FallbackToLogsOnError) may hold more.
    lines = [line.strip() for line in (state.message or "").splitlines() if line.strip()]
    return CleanupPod(
        name=state.name,
        phase=state.phase,
        created_at=state.created_at,
        exit_code=state.exit_code,
        reason=state.reason,
        message=lines[-1] if lines else None,
        deletion_timestamp=state.deletion_timestamp,
    )


def _condition(pod: Mapping[str, Any], kind: str) -> bool:
    """Whether the pod's condition ``kind`` is ``True`` (a standby's Ready: its readiness
    probe found the runtime's readiness file)."""
    conditions = _mapping(pod.get("status")).get("conditions")
    if not isinstance(conditions, list):
        return False
    return any(isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
               for c in conditions)


def _container_status(status: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    statuses = status.get("containerStatuses")
    if not isinstance(statuses, list):
        return {}
    candidates = [item for item in statuses if isinstance(item, Mapping)]
    for item in candidates:
        if item.get("name") == name:
            return item
    return candidates[0] if candidates else {}


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _time(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None
