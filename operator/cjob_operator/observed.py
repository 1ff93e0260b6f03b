"""A typed snapshot of everything ``plan`` needs to know about one CheckpointedJob.

The operator's API module fills it from the CR, its driver pods, its cleanup pod and
its checkpoint ConfigMap; tests build it directly. ``observe_driver_pod`` and
``observe_cleanup_pod`` turn a pod as the API server returns it (a camelCase mapping,
as kopf delivers it) into a ``DriverPod`` or a ``CleanupPod``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from cjob_spec.model import CheckpointedJob
from cjob_spec.names import ANNOTATION_SPEC_HASH, LABEL_ATTEMPT, LABEL_ROLE
from cjob_spec.status import CheckpointRef, JobStatus
from cjob_spec.times import parse_time
from job_runtime.store.restore_report import RestoreReport

POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
DRIVER_CONTAINER = "driver"
CLEANUP_CONTAINER = "cleanup"
ROLE_CLEANUP = "cleanup"


@dataclass(frozen=True)
class DriverPod:
    """One driver pod of the job, reduced to what the decisions depend on.

    ``started_at`` is when the driver container started running; ``exit_code``,
    ``finished_at`` come from its terminated state. ``reason``/``message`` are the most
    telling explanation available: the terminated or waiting reason of the container
    (``OOMKilled``, ``ImagePullBackOff``) or the pod's own (``Evicted``).
    """

    name: str
    attempt: int
    phase: str
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    deletion_timestamp: datetime | None = None
    spec_hash: str | None = None

    @property
    def is_live(self) -> bool:
        """Pending or Running: the process may still be running or about to."""
        return self.phase in ("Pending", "Running")

    @property
    def is_finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def is_terminating(self) -> bool:
        return self.deletion_timestamp is not None


@dataclass(frozen=True)
class CleanupPod:
    """The pod deleting the job's checkpoint data, reduced to what deletion waits on.

    ``message`` is the container's termination message (the cleanup command's
    one-line outcome) or the pod's own explanation; ``exit_code`` is the command's.
    """

    name: str
    phase: str
    created_at: datetime
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    deletion_timestamp: datetime | None = None

    @property
    def is_live(self) -> bool:
        return self.phase in ("Pending", "Running")

    @property
    def is_terminating(self) -> bool:
        return self.deletion_timestamp is not None


class StoreOwnership(Enum):
    """Whose the checkpoint ConfigMap is, by its ``ownerReferences``."""

    THIS_JOB = "ThisJob"
    DELETED_JOB = "DeletedJob"
    """An earlier job of the same name: deleted, and the garbage collector has yet to
    delete its store. Waiting is enough."""
    OTHER = "Other"
    """No CheckpointedJob, or one of another name: left by an orphaning delete, made by
    hand, or copied. Its checkpoints are not this job's."""


@dataclass(frozen=True)
class StoreView:
    """What the operator sees of the checkpoint ConfigMap ``<job>-checkpoints``."""

    exists: bool = False
    ownership: StoreOwnership = StoreOwnership.THIS_JOB
    """Meaningful only when ``exists``."""
    latest: CheckpointRef | None = None
    """The newest completed checkpoint recorded in the store."""
    fence_attempt: int | None = None
    """The attempt currently allowed to write (``checkpointed.io/fence-attempt``)."""
    restore_report: RestoreReport | None = None
    """What a driver reported it restored (``checkpointed.io/restored``); it is about
    ``restore_report.attempt``, which may be an earlier attempt than the current one."""

    @property
    def is_own(self) -> bool:
        """The store exists and is this job's: only then do its records describe the job."""
        return self.exists and self.ownership is StoreOwnership.THIS_JOB


@dataclass(frozen=True)
class Observed:
    """Everything ``plan`` decides on. ``status`` is the CR's current status."""

    job: CheckpointedJob
    status: JobStatus
    pods: tuple[DriverPod, ...] = ()
    cleanup_pod: CleanupPod | None = None
    """The pod deleting the checkpoint data of a job being deleted, once there is one."""
    store: StoreView = StoreView()
    deleting: bool = False
    """The CR has a deletion timestamp: run the finalizer path."""
    default_image: str | None = None
    """The operator's runtime image, for a job without ``spec.image``."""

    @property
    def image(self) -> str | None:
        """The image the job's next driver runs; ``None`` when there is none to run."""
        return self.job.spec.image or self.default_image

    @property
    def generation(self) -> int:
        return self.job.metadata.generation

    @property
    def generation_observed(self) -> bool:
        return self.status.observed_generation == self.job.metadata.generation

    @property
    def suspend(self) -> bool:
        return self.job.spec.suspend

    @property
    def pending_trigger_nonce(self) -> str | None:
        """A manual checkpoint nonce not handled yet, if any."""
        nonce = self.job.spec.checkpoint.trigger_nonce
        return nonce if nonce and nonce != self.status.last_trigger_nonce else None

    def pod(self, name: str | None) -> DriverPod | None:
        return next((pod for pod in self.pods if pod.name == name), None)


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
