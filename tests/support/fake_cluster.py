"""An in-memory stand-in for the API server, for the reconciliation glue's tests.

It keeps the objects the operator creates, applies the fence rule of the real store
(never backwards), records every call in order, and can be told to fail a call.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cjob_operator.cluster import ClusterError, JobRef, Manifest, StatusConflictError, StoreReading

from cjob_checkpoint.store.configmap_layout import StoreOwner
from cjob_checkpoint.store.holds import CheckpointHold
from cjob_spec.names import ANNOTATION_RETAINED
from cjob_spec.standby_signal import PROMOTION_ANNOTATION, StandbyPromotion
from cjob_spec.status import CheckpointRef

BASE_JOB: dict[str, Any] = {
    "apiVersion": "checkpointed.io/v1alpha1",
    "kind": "CheckpointedJob",
    "metadata": {
        "name": "sums",
        "namespace": "team",
        "uid": "uid-1",
        "generation": 1,
        "resourceVersion": "1",
    },
    "spec": {
        "image": "example.org/sums:1.0",
        "job": {"entrypoint": "job:build", "args": {"output": "file:///out"}},
        "parallelism": 2,
        "spark": {"master": "local[2]"},
        "checkpoint": {"storage": "file:///ckpt", "interval": "1s"},
        "restartPolicy": {"type": "OnFailure", "backoff": {"initial": "1s", "max": "10s"}},
    },
}


def job_document(**spec: Any) -> dict[str, Any]:
    """The base job with top-level ``spec`` fields replaced."""
    document = copy.deepcopy(BASE_JOB)
    document["spec"].update(spec)
    return document


@dataclass
class Event:
    type: str
    reason: str
    message: str


@dataclass
class FakeCluster:
    job: dict[str, Any] | None = field(default_factory=job_document)
    pods: dict[str, Manifest] = field(default_factory=dict)
    nodes: dict[str, Manifest] = field(default_factory=dict)
    """Nodes as the test wants them read (any other reads as Ready)."""
    force_deleted: list[str] = field(default_factory=list)
    snapshots: dict[str, Manifest] = field(default_factory=dict)
    objects: dict[tuple[str, str], Manifest] = field(default_factory=dict)
    store: StoreReading | None = None
    store_annotations: dict[str, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    fail: dict[str, ClusterError] = field(default_factory=dict)
    """Method name -> the error it raises (every time)."""
    conflict_status_once: bool = False
    fail_status_once: bool = False
    """The next status write fails (the reply lost, or the operator killed before it)."""

    def _enter(self, method: str, detail: str = "") -> None:
        self.calls.append(f"{method}({detail})" if detail else method)
        error = self.fail.get(method)
        if error is not None:
            raise error

    # --- the job ------------------------------------------------------------------

    def read_job(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        self._enter("read_job")
        return copy.deepcopy(self.job) if self.job is not None else None

    def write_status(
        self, *, job: Mapping[str, Any], status: Mapping[str, Any]
    ) -> Mapping[str, Any] | None:
        self._enter("write_status")
        assert self.job is not None
        if self.conflict_status_once:
            self.conflict_status_once = False
            raise StatusConflictError(namespace="team", name="sums")
        if self.fail_status_once:
            self.fail_status_once = False
            raise ClusterError(operation="write the status", cause="connection reset")
        self.job["status"] = copy.deepcopy(dict(status))
        self.bump_version()
        return copy.deepcopy(self.job)

    def bump_version(self) -> str:
        """A new ``resourceVersion`` for the job, as every write to it gets."""
        assert self.job is not None
        metadata = self.job["metadata"]
        metadata["resourceVersion"] = str(int(metadata["resourceVersion"]) + 1)
        return str(metadata["resourceVersion"])

    @property
    def version(self) -> str:
        assert self.job is not None
        return str(self.job["metadata"]["resourceVersion"])

    @property
    def status(self) -> dict[str, Any]:
        assert self.job is not None
        status: dict[str, Any] = self.job.get("status") or {}
        return status

    # --- the store ----------------------------------------------------------------

    def read_store(self, *, namespace: str, name: str) -> StoreReading | None:
        self._enter("read_store")
        return self.store

    def ensure_checkpoint_configmap(
        self,
        *,
        namespace: str,
        name: str,
        job_name: str,
        owner_reference: Mapping[str, Any],
        labels: Mapping[str, str],
    ) -> None:
        self._enter("ensure_checkpoint_configmap", name)
        if self.store is None:
            owner = StoreOwner(name=str(owner_reference["name"]), uid=str(owner_reference["uid"]))
            self.store = StoreReading(fence_attempt=0, latest=None, size_bytes=200,
                                      owners=(owner,))

    def advance_fence(self, *, namespace: str, name: str, attempt: int) -> None:
        self._enter("advance_fence", str(attempt))
        assert self.store is not None, "the fence needs the ConfigMap"
        assert attempt >= self.store.fence_attempt, "the fence never moves backwards"
        self.store = dataclasses.replace(self.store, fence_attempt=attempt)

    def complete_checkpoint(self, checkpoint_id: int, *, at: datetime) -> None:
        assert self.store is not None
        latest = CheckpointRef(
            id=checkpoint_id,
            path=f"file:///ckpt/sums-uid-1/chk-{checkpoint_id}/_metadata",
            completed_at=at.astimezone(UTC).replace(microsecond=0),
            size_bytes=512,
        )
        self.store = dataclasses.replace(self.store, latest=latest, size_bytes=300,
                                         checkpoints=(*self.store.checkpoints, latest))

    def prune_to(self, *checkpoint_ids: int) -> None:
        """Keep only these checkpoints (and any held), as the driver's pruning would."""
        assert self.store is not None
        held = self.store.holds.held_ids()
        kept = tuple(ref for ref in self.store.checkpoints
                     if ref.id in checkpoint_ids or ref.id in held)
        self.store = dataclasses.replace(self.store, checkpoints=kept)

    def hold_checkpoint(self, *, namespace: str, store: str, checkpoint_id: int, holder: str,
                        by: str) -> bool:
        self._enter("hold_checkpoint", f"{store}, {checkpoint_id}, {holder}")
        if self.store is None or all(ref.id != checkpoint_id for ref in self.store.checkpoints):
            return False
        holds = self.store.holds.with_hold(
            CheckpointHold(holder=holder, checkpoint_id=checkpoint_id, by=by))
        self.store = dataclasses.replace(self.store, holds=holds)
        return True

    def release_checkpoint(self, *, namespace: str, store: str, holder: str) -> None:
        self._enter("release_checkpoint", f"{store}, {holder}")
        if self.store is not None:
            self.store = dataclasses.replace(self.store,
                                             holds=self.store.holds.without(holder))

    def request_checkpoint(self, *, namespace: str, name: str, nonce: str) -> None:
        self._enter("request_checkpoint", f"{name}, {nonce}")
        self.store_annotations["checkpointed.io/checkpoint-request"] = nonce

    def promote_standby(self, *, namespace: str, store: str, promotion: StandbyPromotion,
                        role: str) -> None:
        self._enter("promote_standby", f"{promotion.pod}, {promotion.attempt}")
        self.store_annotations[PROMOTION_ANNOTATION] = promotion.encode()
        if self.store is not None:
            self.store = dataclasses.replace(self.store, promotion=promotion)
        labels = self.pods[str(promotion.pod)]["metadata"]["labels"]
        labels.update({"checkpointed.io/role": role,
                       "checkpointed.io/attempt": str(promotion.attempt)})

    def read_snapshot(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        self._enter("read_snapshot", name)
        return self.snapshots.get(name)

    def list_snapshots(self, *, namespace: str,
                       labels: Mapping[str, str]) -> list[Mapping[str, Any]]:
        self._enter("list_snapshots", ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
        return [s for s in self.snapshots.values()
                if labels.items() <= s["metadata"].get("labels", {}).items()]

    def create_snapshot(self, *, manifest: Manifest) -> None:
        name = manifest["metadata"]["name"]
        self._enter("create_snapshot", name)
        self.snapshots.setdefault(name, copy.deepcopy(manifest))

    def delete_snapshot(self, *, namespace: str, name: str) -> None:
        self._enter("delete_snapshot", name)
        self.snapshots.pop(name, None)

    def delete_configmap(self, *, namespace: str, name: str) -> None:
        self._enter("delete_configmap", name)
        self.store = None

    def retain_configmap(self, *, namespace: str, name: str, message: str) -> None:
        self._enter("retain_configmap", name)
        if self.store is not None:
            self.store = dataclasses.replace(self.store, owners=())
            self.store_annotations[ANNOTATION_RETAINED] = message

    # --- pods and companions ------------------------------------------------------------

    def create_pod(self, *, manifest: Manifest) -> None:
        name = manifest["metadata"]["name"]
        self._enter("create_pod", name)
        self.pods.setdefault(name, copy.deepcopy(manifest))

    def read_node(self, *, name: str) -> Manifest | None:
        """A node that reports (Ready), unless the test set ``nodes[name]``."""
        self._enter("read_node", name)
        if name in self.nodes:
            return self.nodes[name]
        return {"metadata": {"name": name},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}}

    def read_pod(self, *, namespace: str, name: str) -> Manifest | None:
        self._enter("read_pod", name)
        pod = self.pods.get(name)
        return copy.deepcopy(pod) if pod is not None else None

    def list_pods(self, *, namespace: str, labels: Mapping[str, str]) -> list[Manifest]:
        self._enter("list_pods", ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
        return [copy.deepcopy(pod) for pod in self.pods.values()
                if all(pod["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())]

    def delete_pod(self, *, namespace: str, name: str, force: bool) -> None:
        self._enter("delete_pod", name)
        pod = self.pods.get(name)
        if force:
            self.force_deleted.append(name)
            self.pods.pop(name, None)  # no grace period: the object goes at once
        elif pod is not None:
            pod["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00Z"

    def ensure_object(self, *, manifest: Manifest) -> None:
        kind = manifest["kind"]
        self._enter("ensure_object", kind)
        self.objects[(kind, manifest["metadata"]["name"])] = copy.deepcopy(manifest)

    def post_event(self, *, job: JobRef, type: str, reason: str, message: str) -> None:
        self._enter("post_event", reason)
        self.events.append(Event(type=type, reason=reason, message=message))

    # --- helpers for tests ------------------------------------------------------------------

    def set_pod_state(
        self,
        name: str,
        phase: str,
        *,
        started: str = "2024-05-01T12:00:05Z",
        exit_code: int | None = None,
        message: str | None = None,
        ready: bool = False,
    ) -> None:
        """Report a pod's status the way the kubelet would (``message``: the
        container's termination message; ``ready``: its readiness probe passes)."""
        pod = self.pods[name]
        state: dict[str, Any]
        if phase == "Running":
            state = {"running": {"startedAt": started}}
        elif phase in ("Succeeded", "Failed"):
            state = {
                "terminated": {
                    "exitCode": exit_code if exit_code is not None else 0,
                    "startedAt": started,
                    "finishedAt": "2024-05-01T12:00:30Z",
                    "reason": "Completed" if exit_code in (0, None) else "Error",
                    **({"message": message} if message else {}),
                }
            }
        else:
            state = {"waiting": {"reason": "ContainerCreating"}}
        pod["status"] = {
            "phase": phase,
            "containerStatuses": [
                {"name": pod["spec"]["containers"][0]["name"], "state": state}
            ],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
        pod["metadata"].setdefault("creationTimestamp", "2024-05-01T12:00:00Z")

    def pod_list(self) -> list[Manifest]:
        return [copy.deepcopy(pod) for pod in self.pods.values()]

    def reasons(self) -> list[str]:
        return [event.reason for event in self.events]


T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
"""When every test's :class:`Clock` starts."""


class Clock:
    """The reconciler's clock in a test: stands still until the test advances it."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
