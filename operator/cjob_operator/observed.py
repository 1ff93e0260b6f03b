"""Reading what the API server returns into the lifecycle's observations.

``observe_driver_pod`` and ``observe_cleanup_pod`` turn a pod (a camelCase mapping, as
kopf delivers it) into a :class:`~cjob_lifecycle.observed.DriverPod` or a
:class:`~cjob_lifecycle.observed.CleanupPod`, the terms ``plan`` decides in;
``observe_pods`` and ``observe_cleanup`` pick the job's own among the pods of its
name, ``observe_snapshot_pod`` reads a CheckpointedJobSnapshot's pod, and
``observe_store`` reads its checkpoint ConfigMap into a
:class:`~cjob_lifecycle.observed.StoreView` that says whose it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from cjob_lifecycle.observed import (
    POD_PHASES,
    CleanupPod,
    DriverPod,
    ExecutorPod,
    JobSnapshot,
    RestoreSnapshot,
    StoreOwnership,
    StoreView,
)
from cjob_lifecycle.snapshot_observed import SnapshotPod
from cjob_operator.cluster import StoreReading
from cjob_spec.names import (
    ANNOTATION_SPEC_HASH,
    CLEANUP_CONTAINER,
    DRIVER_CONTAINER,
    EXECUTOR_CONTAINER,
    LABEL_ATTEMPT,
    LABEL_JOB,
    LABEL_ROLE,
    LABEL_SNAPSHOT_TRIGGER,
    ROLE_CLEANUP,
    ROLE_DRIVER,
    ROLE_EXECUTOR,
    ROLE_STANDBY,
    SNAPSHOT_CONTAINER,
)
from cjob_spec.snapshot import SnapshotState, SnapshotStatus, SnapshotTrigger
from cjob_spec.times import parse_time


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
    if (not isinstance(attempt_text, str) or not attempt_text.isdigit()
            or labels.get(LABEL_ROLE) == ROLE_EXECUTOR):
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


def observe_snapshot_pod(pod: Mapping[str, Any], *, snapshot_uid: str) -> SnapshotPod | None:
    """Read a snapshot pod manifest; ``None`` unless the snapshot of ``snapshot_uid`` owns
    it: a pod of that name made by someone else must never report a copy."""
    if not _owned_by(pod, snapshot_uid):
        return None
    state = _pod_state(pod, container_name=SNAPSHOT_CONTAINER)
    if state is None:
        return None
    return SnapshotPod(name=state.name, phase=state.phase, exit_code=state.exit_code,
                       reason=state.reason, message=state.message,
                       deletion_timestamp=state.deletion_timestamp)


def observe_job_snapshots(items: Iterable[Mapping[str, Any]], *,
                          job_name: str) -> tuple[JobSnapshot, ...]:
    """The snapshots the operator took of job ``job_name`` by itself: labelled with the
    job and a trigger, and naming the job (a snapshot a user took is never pruned)."""
    found = []
    for item in items:
        metadata = _mapping(item.get("metadata"))
        labels = _mapping(metadata.get("labels"))
        name = metadata.get("name")
        created = _time(metadata.get("creationTimestamp"))
        try:
            trigger = SnapshotTrigger(str(labels.get(LABEL_SNAPSHOT_TRIGGER)))
        except ValueError:
            continue
        if (not isinstance(name, str) or created is None or labels.get(LABEL_JOB) != job_name
                or _mapping(item.get("spec")).get("jobName") != job_name):
            continue
        status = SnapshotStatus.from_dict(_mapping(item.get("status")))
        found.append(JobSnapshot(name=name, trigger=trigger, created_at=created,
                                 state=status.state))
    return tuple(found)


def observe_restore_snapshot(body: Mapping[str, Any] | None, *, name: str) -> RestoreSnapshot:
    """What a fresh start needs of the snapshot ``name``: its state and, once Completed,
    its copy's ``_metadata``."""
    if body is None:
        return RestoreSnapshot(name=name)
    status = SnapshotStatus.from_dict(_mapping(body.get("status")))
    job_name = _mapping(body.get("spec")).get("jobName")
    return RestoreSnapshot(name=name, state=status.state or SnapshotState.PENDING,
                           path=status.path, checkpoint_id=status.checkpoint_id,
                           job_name=job_name if isinstance(job_name, str) else None,
                           message=status.message)


def node_lost_since(node: Mapping[str, Any]) -> datetime | None:
    """Since when the Node has stopped reporting: its ``Ready`` condition is ``Unknown``
    (the node controller's word once the kubelet's heartbeats stopped for its grace
    period). ``False`` is not lost: the kubelet still reports, and runs its pods."""
    ready = _status_condition(node, "Ready")
    if ready is None or ready.get("status") != "Unknown":
        return None
    return _time(ready.get("lastTransitionTime")) or datetime.fromtimestamp(0, UTC)


def node_of(pod: Mapping[str, Any]) -> str | None:
    """The node a running pod was bound to."""
    name = _mapping(pod.get("spec")).get("nodeName")
    return name if isinstance(name, str) and name else None


def running_on(manifests: Iterable[Mapping[str, Any]]) -> set[str]:
    """The nodes where drivers and standbys among ``manifests`` that may still run were
    bound (executors' nodes are never read: only a driver's node ends an attempt)."""
    return {node for manifest in manifests
            if _mapping(manifest.get("status")).get("phase") in ("Pending", "Running")
            and _mapping(_mapping(manifest.get("metadata")).get("labels")).get(LABEL_ROLE)
            != ROLE_EXECUTOR
            and (node := node_of(manifest)) is not None}


def observe_pods(
    manifests: Iterable[Mapping[str, Any]], *, job_name: str, job_uid: str | None,
    lost_nodes: Mapping[str, datetime] | None = None,
) -> tuple[DriverPod, ...]:
    """The job's driver pods among ``manifests`` (the pod index's entries for the job);
    ``lost_nodes`` says which nodes stopped reporting, and since when."""
    lost = lost_nodes or {}
    pods = []
    for manifest in _own_pods(manifests, job_name=job_name, job_uid=job_uid):
        pod = observe_driver_pod(manifest)
        if pod is None:
            continue
        node = node_of(manifest)
        if node is not None and node in lost and not pod.is_finished:
            pod = replace(pod, node_lost_since=lost[node])
        pods.append(pod)
    pods.sort(key=lambda pod: (pod.attempt, pod.name))
    return tuple(pods)


def observe_cleanup(
    manifests: Iterable[Mapping[str, Any]], *, job_name: str, job_uid: str | None
) -> CleanupPod | None:
    """The job's cleanup pod among ``manifests``, if it has one."""
    for manifest in _own_pods(manifests, job_name=job_name, job_uid=job_uid):
        pod = observe_cleanup_pod(manifest)
        if pod is not None:
            return pod
    return None


def observe_executors(
    manifests: Iterable[Mapping[str, Any]], *, job_name: str
) -> tuple[ExecutorPod, ...]:
    """The executor pods of the job's drivers among ``manifests``.

    Spark creates them with the job's labels (the driver's settings ask for them) and
    the driver pod as their owner, not the job, so a pod counts when it has both and
    its owner is a pod. One that merely looks like them holds the job's deletion at
    most ``kill_grace_seconds`` after the operator deleted it (see the plan).
    """
    found = []
    for manifest in manifests:
        metadata = _mapping(manifest.get("metadata"))
        labels = _mapping(metadata.get("labels"))
        owners = metadata.get("ownerReferences") or []
        if (labels.get(LABEL_JOB) != job_name or labels.get(LABEL_ROLE) != ROLE_EXECUTOR
                or not any(isinstance(owner, Mapping) and owner.get("kind") == "Pod"
                           for owner in owners)):
            continue
        state = _pod_state(manifest, container_name=EXECUTOR_CONTAINER)
        if state is not None:
            attempt = labels.get(LABEL_ATTEMPT)
            since, why = _unschedulable(manifest)
            found.append(ExecutorPod(
                name=state.name, phase=state.phase,
                deletion_timestamp=state.deletion_timestamp,
                attempt=int(attempt) if isinstance(attempt, str) and attempt.isdigit() else None,
                unschedulable_since=since, unschedulable_message=why))
    return tuple(sorted(found, key=lambda pod: pod.name))


def _unschedulable(pod: Mapping[str, Any]) -> tuple[datetime | None, str]:
    """Since when the scheduler could not place ``pod``, and its words why (``None``:
    it is placed, or was never judged unschedulable)."""
    condition = _status_condition(pod, "PodScheduled")
    if (condition is not None and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"):
        since = _time(condition.get("lastTransitionTime"))
        return (since or datetime.fromtimestamp(0, UTC)), _text(condition.get("message")) or ""
    return None, ""


def _own_pods(
    manifests: Iterable[Mapping[str, Any]], *, job_name: str, job_uid: str | None
) -> Iterator[Mapping[str, Any]]:
    """The pods labelled with the job's name and owned by the job.

    A label is no proof: anyone who may create pods in the namespace can put the job's
    labels on one (a pod posing as its standby would be promoted). Every pod the
    operator creates is owned by the job, so a pod without that owner (none, or
    another object of the same name: a deleted and re-created job whose old pods are
    still terminating) is not the job's.
    """
    for manifest in manifests:
        if _labelled_for(manifest, job_name) and _owned_by(manifest, job_uid):
            yield manifest


def foreign_pods(
    manifests: Iterable[Mapping[str, Any]], *, job_name: str, job_uid: str | None
) -> tuple[str, ...]:
    """Pods labelled as the job's driver, standby or cleanup pod that the job does not
    own: ignored, and worth a warning (someone else made them look like the job's)."""
    names = []
    for manifest in manifests:
        metadata = _mapping(manifest.get("metadata"))
        role = _mapping(metadata.get("labels")).get(LABEL_ROLE)
        if (role in (ROLE_DRIVER, ROLE_STANDBY, ROLE_CLEANUP)
                and _labelled_for(manifest, job_name) and not _owned_by(manifest, job_uid)
                and isinstance(metadata.get("name"), str)):
            names.append(str(metadata["name"]))
    return tuple(sorted(names))


def _labelled_for(manifest: Mapping[str, Any], job_name: str) -> bool:
    labels = _mapping(_mapping(manifest.get("metadata")).get("labels"))
    return labels.get(LABEL_JOB) == job_name


def _owned_by(manifest: Mapping[str, Any], job_uid: str | None) -> bool:
    """Whether the job of ``job_uid`` owns the pod (``None``: a job not created yet,
    as in a dry run, owns whatever carries its labels)."""
    if not job_uid:
        return True
    owners = _mapping(manifest.get("metadata")).get("ownerReferences") or []
    return any(isinstance(owner, Mapping) and owner.get("uid") == job_uid for owner in owners)


def observe_store(reading: StoreReading | None, *, job_name: str,
                  job_uid: str | None) -> StoreView:
    if reading is None:
        return StoreView(exists=False)
    return StoreView(
        exists=True,
        ownership=store_ownership(reading, job_name=job_name, job_uid=job_uid),
        latest=reading.latest,
        latest_attempt=reading.latest_attempt,
        fence_attempt=reading.fence_attempt,
        restore_report=reading.restore_report,
        driver_lost=reading.driver_lost,
        promotion=reading.promotion,
    )


def store_ownership(reading: StoreReading, *, job_name: str,
                    job_uid: str | None) -> StoreOwnership:
    """Whose the store is: this job's only when the job is among its owners."""
    uids = {owner.uid for owner in reading.owners}
    if job_uid is None or job_uid in uids:
        return StoreOwnership.THIS_JOB
    if any(owner.name == job_name for owner in reading.owners):
        return StoreOwnership.DELETED_JOB
    return StoreOwnership.OTHER


def _status_condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The condition of type ``kind`` in a pod's or a node's status, if it has one."""
    conditions = _mapping(obj.get("status")).get("conditions")
    if not isinstance(conditions, list):
        return None
    return next((c for c in conditions if isinstance(c, Mapping) and c.get("type") == kind),
                None)


def _condition(pod: Mapping[str, Any], kind: str) -> bool:
    """Whether the pod's condition ``kind`` is ``True`` (a standby's Ready: its readiness
    probe found the runtime's readiness file)."""
    condition = _status_condition(pod, kind)
    return condition is not None and condition.get("status") == "True"


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
