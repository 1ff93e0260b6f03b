"""One pass over one CheckpointedJobSnapshot: observe, ``plan_snapshot``, execute, record.

Each pass reads the snapshot, the job it names, the job's checkpoint store (which
checkpoints are retained, which one this snapshot holds) and the snapshot's two pods
fresh from the API server (a snapshot lives for seconds or minutes of work, then never
changes: polling while it works costs little and needs no extra watch). The status
is written only after every action succeeded, as for jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from cjob_lifecycle.snapshot_actions import (
    CreateSnapshotPod,
    DeleteSnapshotPod,
    EmitSnapshotEvent,
    HoldCheckpoint,
    ReleaseCheckpoint,
    ReleaseSnapshot,
    SnapshotAction,
)
from cjob_lifecycle.snapshot_observed import SnapshotJob, SnapshotObserved
from cjob_lifecycle.snapshot_plan import SnapshotPlan, plan_snapshot
from cjob_operator.builders.metadata import Manifest
from cjob_operator.builders.snapshot_pods import build_snapshot_pod
from cjob_operator.cluster import ClusterError, JobRef, StoreReading
from cjob_operator.config import OperatorConfig
from cjob_operator.observed import observe_snapshot_pod
from cjob_spec.errors import SpecError
from cjob_spec.names import (
    API_VERSION,
    KIND,
    SNAPSHOT_KIND,
    checkpoint_configmap_name,
    snapshot_pod_name,
)
from cjob_spec.parse import parse_job
from cjob_spec.snapshot import (
    SnapshotReason,
    SnapshotSpec,
    SnapshotState,
    SnapshotStatus,
    parse_snapshot_spec,
)
from cjob_spec.snapshot_outcome import SnapshotTask

_log = logging.getLogger(__name__)


class SnapshotCluster(Protocol):
    """What a snapshot pass asks of the API server."""

    def read_snapshot(self, *, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def write_snapshot_status(self, *, snapshot: Mapping[str, Any],
                              status: Mapping[str, Any]) -> None: ...

    def read_job(self, *, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def read_store(self, *, namespace: str, name: str) -> StoreReading | None: ...

    def hold_checkpoint(self, *, namespace: str, store: str, checkpoint_id: int, holder: str,
                        by: str) -> bool: ...

    def release_checkpoint(self, *, namespace: str, store: str, holder: str) -> None: ...

    def read_pod(self, *, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def create_pod(self, *, manifest: Manifest) -> None: ...

    def delete_pod(self, *, namespace: str, name: str, force: bool) -> None: ...

    def post_event(self, *, job: JobRef, type: str, reason: str, message: str) -> None: ...


@dataclass(frozen=True)
class SnapshotPass:
    """What one pass decided: ``released`` once a deleted snapshot may go."""

    plan: SnapshotPlan | None
    released: bool = False

    @property
    def requeue_after(self) -> float | None:
        return self.plan.requeue_after if self.plan is not None else None


class SnapshotReconciler:
    def __init__(self, *, cluster: SnapshotCluster, operator_config: OperatorConfig) -> None:
        self._cluster = cluster
        self._config = operator_config

    def reconcile(self, *, namespace: str, name: str, deleting: bool = False,
                  now: datetime | None = None) -> SnapshotPass:
        """One pass; raises :class:`ClusterError` when the API server failed (the caller
        tries again later). A snapshot that is gone needs nothing: released."""
        body = self._cluster.read_snapshot(namespace=namespace, name=name)
        if body is None:
            return SnapshotPass(plan=None, released=True)
        observed = self.observe(body, namespace=namespace,
                                deleting=deleting or _being_deleted(body))
        plan = plan_snapshot(observed, now=now or datetime.now(UTC))
        ref = JobRef(namespace=namespace, name=name, uid=observed.uid, kind=SNAPSHOT_KIND)
        released = False
        status = plan.status
        for action in plan.actions:
            problem = self._execute(action, namespace=namespace, observed=observed, ref=ref)
            if problem is not None:
                status, released = self._refused(action, status=status, problem=problem,
                                                 ref=ref)
                break
            released = released or isinstance(action, ReleaseSnapshot)
        written = status.to_dict()
        if written != dict(body.get("status") or {}) and not released:
            self._cluster.write_snapshot_status(snapshot=body, status=written)
        return SnapshotPass(plan=plan, released=released)

    def observe(self, body: Mapping[str, Any], *, namespace: str,
                deleting: bool) -> SnapshotObserved:
        metadata = body.get("metadata") or {}
        name = str(metadata.get("name"))
        uid = str(metadata.get("uid") or "")
        spec: SnapshotSpec | None = None
        spec_error: str | None = None
        try:
            spec = parse_snapshot_spec(body)
        except SpecError as exc:
            spec_error = str(exc)
        status = SnapshotStatus.from_dict(body.get("status"))
        job = None
        if spec is not None:
            job = self._job(namespace=namespace, name=spec.job_name, holder=uid)
        take = self._pod(namespace, snapshot_pod_name(name), uid)
        dispose = self._pod(namespace, snapshot_pod_name(name, dispose=True), uid) \
            if deleting else None
        generation = metadata.get("generation")
        return SnapshotObserved(
            name=name, uid=uid, generation=generation if isinstance(generation, int) else None,
            spec=spec, spec_error=spec_error, status=status, deleting=deleting, job=job,
            take_pod=take, dispose_pod=dispose)

    def _job(self, *, namespace: str, name: str, holder: str) -> SnapshotJob | None:
        body = self._cluster.read_job(namespace=namespace, name=name)
        if body is None:
            return None
        uid = (body.get("metadata") or {}).get("uid")
        spec = body.get("spec")
        if not isinstance(uid, str) or not isinstance(spec, Mapping):
            return None
        store = checkpoint_configmap_name(name)
        reading = self._cluster.read_store(namespace=namespace, name=store)
        if reading is None or not any(owner.uid == uid for owner in reading.owners):
            # No store yet, or one left by an earlier job of the same name: nothing of
            # this job's to copy or to hold.
            return SnapshotJob(uid=uid, spec=spec, store=store)
        hold = reading.holds.of(holder)
        return SnapshotJob(uid=uid, spec=spec, store=store, checkpoints=reading.checkpoints,
                           held=hold.checkpoint_id if hold is not None else None)

    def _pod(self, namespace: str, name: str, uid: str) -> Any:
        manifest = self._cluster.read_pod(namespace=namespace, name=name)
        return observe_snapshot_pod(manifest, snapshot_uid=uid) if manifest is not None else None

    def _execute(self, action: SnapshotAction, *, namespace: str, observed: SnapshotObserved,
                 ref: JobRef) -> str | None:
        """Carry out one action; a problem that no retry mends is returned in words."""
        match action:
            case CreateSnapshotPod():
                try:
                    manifest = self._pod_manifest(action, namespace=namespace, observed=observed)
                except SpecError as exc:
                    return f"no pod can be built from job {action.job_name}'s spec: {exc}"
                existing = self._cluster.read_pod(namespace=namespace, name=action.name)
                if existing is not None and observe_snapshot_pod(
                        existing, snapshot_uid=observed.uid) is None:
                    return (f"pod {action.name} exists and is not this snapshot's; "
                            f"delete it, or name the snapshot otherwise")
                self._cluster.create_pod(manifest=manifest)
            case DeleteSnapshotPod():
                self._cluster.delete_pod(namespace=namespace, name=action.name, force=False)
            case HoldCheckpoint():
                # Refused (pruned meanwhile): the next pass sees no hold and asks again.
                self._cluster.hold_checkpoint(namespace=namespace, store=action.store,
                                              checkpoint_id=action.checkpoint_id,
                                              holder=action.holder, by=action.by)
            case ReleaseCheckpoint():
                self._cluster.release_checkpoint(namespace=namespace, store=action.store,
                                                 holder=action.holder)
            case EmitSnapshotEvent():
                self._event(ref, action)
            case ReleaseSnapshot():
                pass
        return None

    def _pod_manifest(self, action: CreateSnapshotPod, *, namespace: str,
                      observed: SnapshotObserved) -> Manifest:
        job = parse_job({
            "apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": action.job_name, "namespace": namespace, "uid": action.job_uid},
            "spec": dict(action.job_spec),
        })
        image = job.spec.image or self._config.default_image
        if image is None:
            raise SpecError(field="spec.image", problem="is not set, and the operator has no "
                                                        "runtime image")
        return build_snapshot_pod(job, name=action.name, snapshot_name=observed.name,
                                  snapshot_uid=observed.uid, task=action.task,
                                  target=action.target, checkpoint=action.checkpoint,
                                  image=image, operator_config=self._config)

    def _refused(self, action: SnapshotAction, *, status: SnapshotStatus, problem: str,
                 ref: JobRef) -> tuple[SnapshotStatus, bool]:
        """A pod that cannot be made: the copy fails; a disposal keeps the files."""
        if isinstance(action, CreateSnapshotPod) and action.task is SnapshotTask.DISPOSE:
            message = f"the snapshot's files were kept at {action.target}: {problem}"
            self._event(ref, EmitSnapshotEvent("Warning", SnapshotReason.KEPT, message))
            return status, True
        self._event(ref, EmitSnapshotEvent("Warning", SnapshotReason.FAILED, problem))
        return status.replace(state=SnapshotState.FAILED, reason=SnapshotReason.FAILED,
                              message=problem), False

    def _event(self, ref: JobRef, event: EmitSnapshotEvent) -> None:
        try:
            self._cluster.post_event(job=ref, type=event.type, reason=event.reason,
                                     message=event.message)
        except ClusterError as exc:  # an Event is worth a try, never a failed pass
            _log.warning("could not post event %s on snapshot %s/%s: %s", event.reason,
                         ref.namespace, ref.name, exc)


def _being_deleted(body: Mapping[str, Any]) -> bool:
    return bool((body.get("metadata") or {}).get("deletionTimestamp"))
