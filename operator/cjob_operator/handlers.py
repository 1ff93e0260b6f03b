"""kopf handlers: thin wiring from kopf's events to the reconciliation loop.

* One daemon per CheckpointedJob runs :func:`cjob_operator.loops.run_job_loop`, which
  reconciles from the observed state whenever the job, its driver pods or its
  checkpoint ConfigMap change, and when the plan's requeue delay expires.
* The pod index gives each pass the job's driver pods without an API call; the
  store index and the job's live body give it the versions its watches last saw,
  so a pass over a job whose job and store did not change reads neither.
* Event handlers only wake the job's loop; they never decide anything.
* The delete handler runs the finalizer path until the plan says it is done; kopf
  removes the ``checkpointed.io/finalizer`` finalizer when it returns.
* A CheckpointedJobSnapshot gets a daemon that works until the snapshot is Completed
  or Failed, and a delete handler that disposes of its copy before kopf lets it go.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from cjob_operator import startup
from cjob_operator.cluster import ClusterError
from cjob_operator.loops import (
    finalize_job,
    finalize_snapshot,
    run_job_loop,
    run_snapshot_loop,
)
from cjob_operator.read_cache import WatchedVersions
from cjob_spec.names import (
    API_GROUP,
    API_VERSION,
    LABEL_JOB,
    LABEL_ROLE,
    PLURAL,
    ROLE_EXECUTOR,
    SNAPSHOT_PLURAL,
    checkpoint_configmap_name,
)

VERSION = API_VERSION.split("/", 1)[1]
def _is_driver_role(value: object, **_: Any) -> bool:
    """A driver pod, or a standby driver pod (``spec.standby``), never an executor."""
    return value in startup.DRIVER_ROLES


DRIVER_LABELS: dict[str, Any] = {
    LABEL_JOB: kopf.PRESENT,
    LABEL_ROLE: _is_driver_role,
}
EXECUTOR_LABELS: dict[str, Any] = {LABEL_JOB: kopf.PRESENT, LABEL_ROLE: ROLE_EXECUTOR}
STORE_LABELS: dict[str, Any] = {LABEL_JOB: kopf.PRESENT}
FINALIZE_RETRY_SECONDS = 5.0

__all__ = ["startup"]

PodIndex = kopf.Index[tuple[str, str], dict[str, Any]]
VersionIndex = kopf.Index[tuple[str, str], str]


def _runtime(memo: Any) -> startup.OperatorRuntime:
    runtime: startup.OperatorRuntime = memo.runtime
    return runtime


def _pods(kwargs: Mapping[str, Any], namespace: str | None, name: str) -> list[dict[str, Any]]:
    index: PodIndex = kwargs["driver_pods"]
    return list(index.get((namespace or "", name), []))


def _pods_and_executors(kwargs: Mapping[str, Any], namespace: str | None,
                        name: str) -> list[dict[str, Any]]:
    """The job's pods and the executors its drivers created: a pass tells each kind by
    its role and owner, and a running job is stuck when an executor cannot be placed."""
    executors: PodIndex = kwargs["executor_pods"]
    return [*_pods(kwargs, namespace, name), *executors.get((namespace or "", name), [])]


@kopf.index("v1", "pods", labels=DRIVER_LABELS)
def driver_pods(
    *, namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[tuple[str, str | None], dict[str, Any]]:
    return {(namespace or "", labels.get(LABEL_JOB)): dict(body.items())}


@kopf.index("v1", "pods", labels=EXECUTOR_LABELS)
def executor_pods(
    *, namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[tuple[str, str | None], dict[str, Any]]:
    """Indexed, not watched for passes: an executor's changes are many and a job's
    loop passes at least every minute, which is soon enough for one left unplaced."""
    return {(namespace or "", labels.get(LABEL_JOB)): dict(body.items())}


def _watched(kwargs: Mapping[str, Any], body: Mapping[str, Any], namespace: str | None,
             name: str) -> WatchedVersions:
    """What the watches last delivered: kopf keeps a daemon's ``body`` up to date with
    every event of the job, and the store index with every event of the ConfigMap."""
    index: VersionIndex = kwargs["store_versions"]
    stores = list(index.get((namespace or "", checkpoint_configmap_name(name)), []))
    version = (body.get("metadata") or {}).get("resourceVersion")
    return WatchedVersions(job=str(version) if version else None,
                           store=stores[0] if stores else None)


@kopf.index("v1", "configmaps", labels=STORE_LABELS)
def store_versions(
    *, namespace: str | None, name: str, meta: Mapping[str, Any], **_: Any
) -> dict[tuple[str, str], str]:
    return {(namespace or "", name): str(meta.get("resourceVersion") or "")}


@kopf.daemon(API_GROUP, VERSION, PLURAL, cancellation_backoff=5.0, cancellation_timeout=30.0)
async def job_loop(
    *, namespace: str | None, name: str, stopped: kopf.DaemonStopped, memo: Any,
    body: kopf.Body, **kwargs: Any
) -> None:
    runtime = _runtime(memo)
    await run_job_loop(
        reconciler=runtime.reconciler, wakeups=runtime.wakeups, namespace=namespace or "",
        name=name, pods=lambda: _pods_and_executors(kwargs, namespace, name), stopped=stopped,
        settings=runtime.loop_settings,
        watched=lambda: _watched(kwargs, body, namespace, name),
    )


@kopf.on.delete(API_GROUP, VERSION, PLURAL)
async def job_deleted(*, namespace: str | None, name: str, memo: Any, **kwargs: Any) -> None:
    outcome = await finalize_job(reconciler=_runtime(memo).reconciler, namespace=namespace or "",
                                 name=name, pods=_pods(kwargs, namespace, name))
    if not (outcome.finalized or outcome.gone):
        raise kopf.TemporaryError(outcome.error or "waiting for the driver to stop",
                                  delay=outcome.requeue_after or FINALIZE_RETRY_SECONDS)


@kopf.on.event(API_GROUP, VERSION, PLURAL)
async def job_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
    _runtime(memo).wakeups.wake_on_job_change(body)


@kopf.on.event("v1", "pods", labels=DRIVER_LABELS)
async def driver_pod_changed(
    *, namespace: str | None, labels: Mapping[str, str], memo: Any, **_: Any
) -> None:
    _runtime(memo).wakeups.wake(namespace, labels.get(LABEL_JOB))


@kopf.on.event("v1", "configmaps", labels=STORE_LABELS)
async def store_changed(
    *, namespace: str | None, labels: Mapping[str, str], memo: Any, **_: Any
) -> None:
    _runtime(memo).wakeups.wake(namespace, labels.get(LABEL_JOB))


@kopf.daemon(API_GROUP, VERSION, SNAPSHOT_PLURAL, cancellation_backoff=5.0,
             cancellation_timeout=30.0)
async def snapshot_loop(*, namespace: str | None, name: str, stopped: kopf.DaemonStopped,
                        memo: Any, **_: Any) -> None:
    await run_snapshot_loop(reconciler=_runtime(memo).snapshots, namespace=namespace or "",
                            name=name, stopped=stopped)


@kopf.on.delete(API_GROUP, VERSION, SNAPSHOT_PLURAL)
async def snapshot_deleted(*, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    try:
        result = await finalize_snapshot(reconciler=_runtime(memo).snapshots,
                                         namespace=namespace or "", name=name)
    except ClusterError as exc:
        raise kopf.TemporaryError(str(exc), delay=FINALIZE_RETRY_SECONDS) from None
    if not result.released:
        raise kopf.TemporaryError("disposing of the snapshot's files",
                                  delay=result.requeue_after or FINALIZE_RETRY_SECONDS)
