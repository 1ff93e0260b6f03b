"""Builders of observations for the operator's plan and builder tests."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from cjob_operator.cluster import JobRef, StoreReading

from cjob_lifecycle.observed import CleanupPod, DriverPod, ExecutorPod, Observed, StoreView
from cjob_lifecycle.plan import Plan, PlanSettings, plan
from cjob_spec import CheckpointedJob, CheckpointRef, JobStatus, Phase, parse_job, spec_hash

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
SETTINGS = PlanSettings()
IMAGE = "example.org/clicks:1.0"
"""The base job's ``spec.image``."""
RUNTIME_IMAGE = "checkpointed-jobs/runtime:0.1.0"
"""An operator's runtime image (the image of jobs without ``spec.image``)."""

BASE: dict[str, Any] = {
    "apiVersion": "checkpointed.io/v1alpha1",
    "kind": "CheckpointedJob",
    "metadata": {"name": "clicks", "namespace": "team", "uid": "uid-1", "generation": 1},
    "spec": {
        "image": IMAGE,
        "job": {"entrypoint": "clicks.job:build", "args": {"output": "s3://out/clicks"}},
        "parallelism": 2,
        "spark": {"executor": {"instances": 2}},
        "checkpoint": {
            "storage": "s3://ckpt/jobs",
            "s3": {"endpoint": "http://minio:9000", "credentialsSecret": "s3-creds"},
        },
    },
}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def document(**fields: Any) -> dict[str, Any]:
    """The base document with dotted ``spec`` paths set: ``document(suspend=True)``,
    ``document(**{"restartPolicy.type": "Never"})``."""
    result = copy.deepcopy(BASE)
    for path, value in fields.items():
        node = result["spec"]
        *parents, last = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return result


def make_job(**fields: Any) -> CheckpointedJob:
    return parse_job(document(**fields))


def checkpoint(checkpoint_id: int, completed: datetime) -> CheckpointRef:
    return CheckpointRef(
        id=checkpoint_id,
        path=f"s3://ckpt/jobs/clicks-uid-1/chk-{checkpoint_id}/_metadata",
        completed_at=completed,
        size_bytes=1024,
    )


def driver(
    attempt: int,
    phase: str = "Running",
    *,
    job: CheckpointedJob | None = None,
    created: datetime = T0,
    started: datetime | None = None,
    finished: datetime | None = None,
    exit_code: int | None = None,
    reason: str | None = None,
    message: str | None = None,
    deleting: datetime | None = None,
    hash_of: CheckpointedJob | None = None,
) -> DriverPod:
    """A driver pod of ``attempt``; running pods start 5 s after creation by default."""
    if started is None and phase in ("Running", "Succeeded", "Failed"):
        started = created + timedelta(seconds=5)
    if finished is None and phase in ("Succeeded", "Failed"):
        finished = (started or created) + timedelta(seconds=60)
    if exit_code is None and phase == "Succeeded":
        exit_code = 0
    return DriverPod(
        name=f"clicks-attempt-{attempt}",
        attempt=attempt,
        phase=phase,
        created_at=created,
        started_at=started,
        finished_at=finished,
        exit_code=exit_code,
        reason=reason,
        message=message,
        deletion_timestamp=deleting,
        spec_hash=spec_hash(hash_of or job or make_job()),
    )


def status(
    phase: Phase | None,
    attempt: int = 1,
    *,
    job: CheckpointedJob | None = None,
    **changes: Any,
) -> JobStatus:
    base = JobStatus()
    if phase is not None:
        base = JobStatus(
            phase=phase,
            attempt=attempt,
            driver_pod=f"clicks-attempt-{attempt}",
            spec_hash=spec_hash(job or make_job()),
            started_at=T0,
        )
    return base.replace(**changes)


def observe(
    job: CheckpointedJob | None = None,
    job_status: JobStatus | None = None,
    *pods: DriverPod,
    store: StoreView | None = None,
    deleting: bool = False,
    default_image: str | None = None,
    cleanup_pod: CleanupPod | None = None,
    executors: tuple[ExecutorPod, ...] = (),
) -> Observed:
    return Observed(
        job=job or make_job(),
        status=job_status or JobStatus(),
        pods=tuple(pods),
        executors=executors,
        cleanup_pod=cleanup_pod,
        store=store or StoreView(exists=True, fence_attempt=max([0, *(p.attempt for p in pods)])),
        deleting=deleting,
        default_image=default_image,
    )


def run(observed: Observed, now: datetime) -> Plan:
    return plan(observed, now=now, settings=SETTINGS)


def kinds(result: Plan) -> list[str]:
    return [type(action).__name__ for action in result.actions]


def reasons(result: Plan) -> list[str]:
    from cjob_lifecycle.actions import EmitEvent

    return [action.reason for action in result.of_type(EmitEvent)]


class RecordingCluster:
    """Just enough of a cluster for reconcile passes over one new job: it holds the
    job and its status and records the pods it is asked to create and the Events."""

    def __init__(self, job: Mapping[str, Any]) -> None:
        self.job = {**copy.deepcopy(dict(job)), "status": {}}
        self.pods: list[Mapping[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []

    def read_job(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.job

    def write_status(self, *, job: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        self.job["status"] = dict(status)

    def read_store(self, *, namespace: str, name: str) -> StoreReading | None:
        return None

    def ensure_checkpoint_configmap(self, **_: Any) -> None:
        pass

    def ensure_object(self, **_: Any) -> None:
        pass

    def advance_fence(self, **_: Any) -> None:
        pass

    def create_pod(self, *, manifest: Mapping[str, Any]) -> None:
        self.pods.append(manifest)

    def delete_pod(self, **_: Any) -> None:
        pass

    def request_checkpoint(self, **_: Any) -> None:
        pass

    def promote_standby(self, **_: Any) -> None:
        pass

    def post_event(self, *, job: JobRef, type: str, reason: str, message: str) -> None:
        self.events.append((type, reason, message))
