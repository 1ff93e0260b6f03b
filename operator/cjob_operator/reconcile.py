"""One reconciliation pass over one CheckpointedJob: observe, plan, execute, record.

Each pass starts from what the API server has *now* (the job is read fresh, its
driver pods come from the operator's pod index, a deleted job's cleanup pod is read, its
checkpoint store is read), never from the event that woke it up; the last reading may
stand in for a read when the watches say nothing changed (:mod:`cjob_operator.read_cache`).
``plan`` decides; the actions are executed in order and the pass stops at the first
failing one (:mod:`cjob_operator.executor`). The status ``plan`` returns is written only
when all actions succeeded, so the status never claims something that did not happen.
A pass that stops on an error is retried with backoff, and the error is posted on the job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cjob_lifecycle.actions import (
    AdvanceFence,
    CreateCleanupPod,
    CreateDriver,
    DeleteCheckpointStore,
    EmitEvent,
    EnsureCheckpointConfigMap,
    EventType,
    PromoteStandby,
    RequestCheckpoint,
    RequeueAfter,
)
from cjob_lifecycle.observed import JobSnapshot, MetricSample, Observed
from cjob_lifecycle.plan import Plan, PlanSettings, plan, plan_invalid_spec
from cjob_lifecycle.plan.deletion import retention
from cjob_operator.cluster import (
    Cluster,
    ClusterError,
    JobRef,
    StatusConflictError,
    StoreReading,
)
from cjob_operator.config import OperatorConfig
from cjob_operator.executor import ActionExecutor, ExecutionReport, job_ref, post_event
from cjob_operator.metrics import OperatorMetrics
from cjob_operator.node_health import NodeHealth
from cjob_operator.observed import (
    foreign_pods,
    observe_cleanup,
    observe_executors,
    observe_job_snapshots,
    observe_pods,
    observe_restore_snapshot,
    observe_store,
    running_on,
)
from cjob_operator.read_cache import JobKey, ReadCache, ReadSettings, WatchedVersions
from cjob_operator.scaling_samples import ScalingSamples
from cjob_spec.errors import SpecError
from cjob_spec.model import CheckpointCleanup, CheckpointedJob
from cjob_spec.names import LABEL_JOB, LABEL_ROLE, ROLE_EXECUTOR, cleanup_pod_name
from cjob_spec.parse import parse_job
from cjob_spec.reasons import PodReason, Reason
from cjob_spec.status import DiscardedReplacement, JobStatus, Phase

_log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class RetrySettings:
    """How soon a pass that stopped on an error is retried."""

    first_delay: float = 1.0
    max_delay: float = 60.0
    final_error_delay: float = 30.0
    """Delay after an error that retrying cannot fix by itself (refused request)."""
    conflict_delay: float = 0.2
    """Delay after the status changed under us: plan again at once, from a fresh read."""


@dataclass(frozen=True)
class Outcome:
    """What a pass achieved and when the job wants to be looked at again."""

    requeue_after: float | None = None
    """Seconds until the next pass is due even without news; None: only on news."""
    finalized: bool = False
    """The job is being deleted and everything the finalizer guards is done."""
    gone: bool = False
    """The job no longer exists."""
    error: str | None = None
    phase: Phase | None = None


@dataclass(frozen=True)
class _Planned:
    body: Mapping[str, Any]
    job: CheckpointedJob
    reading: StoreReading | None
    result: Plan
    remembered: bool
    """Whether the job or the store came from an earlier reading, not the API server."""


STORE_WRITES = (EnsureCheckpointConfigMap, AdvanceFence, RequestCheckpoint,
                PromoteStandby, DeleteCheckpointStore)
"""Actions that change the store: the pass's reading of it is stale afterwards."""
PASSIVE = (RequeueAfter, EmitEvent)
"""Actions that change nothing the plan decides by."""
RESTART_REASONS = (Reason.RESTARTED, Reason.UPGRADED, Reason.RETRYING)
"""The reasons of an attempt that starts after an earlier one: each counts as a restart."""


def _acts(result: Plan) -> bool:
    """Whether the plan changes anything besides the job's status and Events."""
    return any(not isinstance(action, PASSIVE) for action in result.actions)


def _restores_a_checkpoint(job: CheckpointedJob, status: JobStatus) -> bool:
    """Whether a driver just created was asked to restore a checkpoint.

    ``status.restoredFrom`` only says so once the driver reports, so the count of
    restoring drivers goes by the request: the latest checkpoint, or one the spec names.
    """
    return status.latest_checkpoint is not None or job.spec.restore.source.kind in ("id", "path")


class Reconciler:
    """Runs passes over jobs; safe to call from several threads (one pass per job at a time)."""

    def __init__(
        self,
        *,
        cluster: Cluster,
        operator_config: OperatorConfig | None = None,
        plan_settings: PlanSettings | None = None,
        retry: RetrySettings | None = None,
        metrics: OperatorMetrics | None = None,
        clock: Clock = utc_now,
        reads: ReadSettings | None = None,
    ) -> None:
        self.cluster = cluster
        self.operator_config = operator_config or OperatorConfig()
        self.plan_settings = plan_settings or PlanSettings()
        self.retry = retry or RetrySettings()
        self.metrics = metrics
        self.clock = clock
        self.reads = reads or ReadSettings()
        self.executor = ActionExecutor(cluster=cluster, operator_config=self.operator_config,
                                       reuse_seconds=self.reads.reuse_seconds)
        self.readings = ReadCache(cluster=cluster, settings=self.reads)
        self.nodes = NodeHealth(read_node=lambda name: cluster.read_node(name=name),
                                monotonic=lambda: self.clock().timestamp())
        self._locks: dict[JobKey, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._failures: dict[JobKey, int] = {}
        self._last_error: dict[JobKey, str] = {}
        self._foreign_reported: dict[JobKey, set[str]] = {}
        self.scaling = ScalingSamples(port=self.operator_config.metrics_port)

    # --- entry point -----------------------------------------------------------------

    def reconcile(
        self,
        *,
        namespace: str,
        name: str,
        pods: Iterable[Mapping[str, Any]],
        watched: WatchedVersions | None = None,
    ) -> Outcome:
        """One pass over ``namespace/name``; ``pods`` are the job's pods from the index.

        With ``watched`` (what the watches last saw of the job and its store) the pass
        may plan from its previous readings; without, it reads both.
        """
        started = time.monotonic()
        key = (namespace, name)
        with self._lock_for(key):
            try:
                outcome = self._pass(namespace=namespace, name=name, pods=list(pods),
                                     watched=watched)
            except Exception as exc:  # any bug must surface on the job, not end its loop
                self.readings.forget(key)
                outcome = self._unexpected(key, error=exc)
            finally:
                if self.metrics is not None:
                    self.metrics.reconcile_seconds.observe(time.monotonic() - started)
        if outcome.gone or outcome.finalized:
            self._forget(key)
        return outcome

    def _lock_for(self, key: JobKey) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def _forget(self, key: JobKey) -> None:
        with self._locks_guard:
            self._locks.pop(key, None)
        self._failures.pop(key, None)
        self._last_error.pop(key, None)
        self.readings.forget(key)
        self.executor.forget(namespace=key[0], name=key[1])
        if self.metrics is not None:
            self.metrics.forget_job(namespace=key[0], name=key[1])

    # --- the pass ----------------------------------------------------------------------

    def _pass(
        self,
        *,
        namespace: str,
        name: str,
        pods: list[Mapping[str, Any]],
        watched: WatchedVersions | None,
    ) -> Outcome:
        key = (namespace, name)
        planned = self._plan(key, pods=pods, watched=watched, reuse=True)
        if isinstance(planned, _Planned) and planned.remembered and _acts(planned.result):
            # A plan that acts is made from what the API server has now, never from
            # a reading that a watch event still in flight may have overtaken.
            planned = self._plan(key, pods=pods, watched=watched, reuse=False)
        if isinstance(planned, Outcome):
            return planned
        body, job, result, reading = planned.body, planned.job, planned.result, planned.reading
        report = self.executor.execute(result.actions, job=job)
        if any(isinstance(a, STORE_WRITES) for a in (*report.executed, report.failed_action)):
            self.readings.forget_store(key)
        if report.error is not None:
            self.readings.forget(key)
            step = type(report.failed_action).__name__ if report.failed_action else "execute"
            if isinstance(report.failed_action, CreateDriver) and not report.error.retryable:
                self._record_refused_driver(body, result, report.error)
            failed = report.failed_action
            if isinstance(failed, CreateCleanupPod) and not report.error.retryable:
                own = observe_store(reading, job_name=name, job_uid=job.metadata.uid).is_own
                return self._cleanup_refused(key, job, failed, report.error, store_is_own=own)
            return self._failed(key, step=step, error=report.error, job=job)
        if report.finalized:
            self._record(job, status=result.status, reading=reading, pending=None)
            return Outcome(finalized=True, phase=result.status.phase)
        try:
            wrote, written = self._write_status(body, result)
        except StatusConflictError as exc:
            self.readings.forget(key)
            _log.info("%s/%s: %s; planning again", namespace, name, exc)
            return Outcome(requeue_after=self.retry.conflict_delay, error=str(exc))
        except ClusterError as exc:
            self.readings.forget(key)
            return self._failed(key, step="write-status", error=exc, job=job)
        if wrote:
            self.readings.remember_written(key, written)
        self._record(job, status=result.status, reading=reading, pending=report)
        self._failures.pop(key, None)
        self._last_error.pop(key, None)
        return Outcome(requeue_after=result.requeue_after, phase=result.status.phase)

    def _plan(
        self, key: JobKey, *, pods: list[Mapping[str, Any]],
        watched: WatchedVersions | None, reuse: bool,
    ) -> _Planned | Outcome:
        """Observe and plan; the Outcome of a pass that ends before planning.

        With ``reuse`` the job and the store are remembered instead of read when the
        watches allow it.
        """
        namespace, name = key
        try:
            body, job_remembered = self.readings.read_job(key, watched, reuse=reuse)
        except ClusterError as exc:
            return self._failed(key, step="read-job", error=exc, job=None)
        if body is None:
            self._foreign_reported.pop(key, None)
            self.scaling.forget(key)
            return Outcome(gone=True)
        metadata = body.get("metadata") or {}
        deleting = bool(metadata.get("deletionTimestamp"))
        status = JobStatus.from_dict(body.get("status"))
        now = self.clock()
        try:
            job = parse_job(body)
        except SpecError as exc:
            self.readings.forget(key)
            return self._invalid_spec(body, status=status, error=exc, now=now, deleting=deleting)
        try:
            reading, store_remembered = self.readings.read_store(key, watched, reuse=reuse)
        except ClusterError as exc:
            return self._failed(key, step="read-store", error=exc, job=job)
        cleanup: list[Mapping[str, Any]] = []
        executors: list[Mapping[str, Any]] = []
        if deleting and job.spec.cleanup_policy.checkpoints is CheckpointCleanup.DELETE:
            # Read, not indexed: only a job being deleted has one, for a few seconds,
            # and only its deletion waits for the executors Spark created.
            try:
                found = self.cluster.read_pod(namespace=namespace, name=cleanup_pod_name(name))
                executors = self.cluster.list_pods(
                    namespace=namespace, labels={LABEL_JOB: name, LABEL_ROLE: ROLE_EXECUTOR})
            except ClusterError as exc:
                return self._failed(key, step="read-cleanup-pod", error=exc, job=job)
            cleanup = [found] if found is not None else []
        elif not deleting:
            # The index's: an executor the scheduler cannot place holds a running job.
            executors = list(pods)
        self._report_foreign(key, job, pods)
        restore_snapshot = None
        source = job.spec.restore.source
        # Read while a start may restore it: before the job's first checkpoint, and
        # while a redeploy to it is asked for or in effect.
        redeploying = (status.discarded_replacement is DiscardedReplacement.RESTORE_SOURCE
                       or (job.spec.restore.redeploy_nonce or None)
                       not in (None, status.last_redeploy_nonce))
        if source.snapshot is not None and not deleting and (
                status.latest_checkpoint is None or redeploying):
            try:
                body_of_snapshot = self.cluster.read_snapshot(namespace=namespace,
                                                              name=source.snapshot)
            except ClusterError as exc:
                return self._failed(key, step="read-snapshot", error=exc, job=job)
            restore_snapshot = observe_restore_snapshot(body_of_snapshot, name=source.snapshot)
        own_snapshots: tuple[JobSnapshot, ...] = ()
        if job.spec.snapshots.in_use and not deleting:
            try:
                listed = self.cluster.list_snapshots(namespace=namespace,
                                                     labels={LABEL_JOB: name})
            except ClusterError as exc:
                return self._failed(key, step="list-snapshots", error=exc, job=job)
            own_snapshots = observe_job_snapshots(listed, job_name=name)
        samples: tuple[MetricSample, ...] = ()
        if job.spec.autoscaler.enabled and not deleting and status.phase is Phase.RUNNING:
            driver = next((p for p in pods if (p.get("metadata") or {}).get("name")
                           == status.driver_pod), None)
            samples = self.scaling.observe(key, pod=driver, attempt=status.attempt, now=now)
        observed = Observed(
            job=job,
            status=status,
            scaling_samples=samples,
            pods=observe_pods(pods, job_name=name, job_uid=job.metadata.uid,
                              lost_nodes=self.nodes.lost(running_on(pods))),
            executors=observe_executors(executors, job_name=name),
            cleanup_pod=observe_cleanup(cleanup, job_name=name, job_uid=job.metadata.uid),
            store=observe_store(reading, job_name=name, job_uid=job.metadata.uid),
            deleting=deleting,
            default_image=self.operator_config.default_image,
            restore_snapshot=restore_snapshot,
            snapshots=own_snapshots,
            raw_spec=spec if isinstance(spec := body.get("spec"), Mapping) else None,
        )
        result = plan(observed, now=now, settings=self.plan_settings)
        # The pods are built from the spec the plan decided for: a rolled-back job's
        # stable spec, not its own (``cjob_lifecycle.plan.rollback``).
        return _Planned(body=body, job=result.job or job, reading=reading, result=result,
                        remembered=job_remembered or store_remembered)

    def _report_foreign(self, key: JobKey, job: CheckpointedJob,
                        pods: list[Mapping[str, Any]]) -> None:
        """A Warning, once per pod, for pods that carry the job's labels and a driver's,
        standby's or cleanup pod's role without being the job's: they are ignored."""
        reported = self._foreign_reported.setdefault(key, set())
        for pod in foreign_pods(pods, job_name=job.metadata.name, job_uid=job.metadata.uid):
            if pod in reported:
                continue
            reported.add(pod)
            self._post(job_ref(job), "Warning", Reason.FOREIGN_POD_IGNORED,
                       f"pod {pod} carries this job's labels but was not created for it (it "
                       f"has no owner reference to the job): it is ignored, never adopted "
                       f"as a driver or standby")

    def _cleanup_refused(
        self, key: JobKey, job: CheckpointedJob, action: CreateCleanupPod, error: ClusterError,
        *, store_is_own: bool,
    ) -> Outcome:
        """The API server refused the cleanup pod for good (a quota, an admission policy).

        Retrying cannot help and a deletion must never be held forever: the data and its
        index are kept, the Warning says where and why, and the job goes.
        """
        actions = retention(job_name=job.metadata.name, where=", ".join(action.uris),
                            why=str(error), store_is_own=store_is_own)
        report = self.executor.execute(actions, job=job)
        if report.error is not None:
            step = type(report.failed_action).__name__ if report.failed_action else "execute"
            return self._failed(key, step=step, error=report.error, job=job)
        return Outcome(finalized=True)

    def _record_refused_driver(
        self, body: Mapping[str, Any], result: Plan, error: ClusterError
    ) -> None:
        """The API server refused the driver pod for good (a quota, an admission policy).

        The attempt is recorded as started anyway: the plan then sees its pod missing
        after the grace period and applies the restart policy, so a job whose pods are
        refused ends Failed after ``maxRestarts`` instead of retrying forever.
        """
        status = result.status.replace(reason=Reason.DRIVER_CREATE_FAILED, message=str(error))
        try:
            self._write_status(body, Plan(actions=result.actions, status=status))
        except ClusterError as exc:
            _log.warning("could not record the refused driver pod: %s", exc)

    def _write_status(
        self, body: Mapping[str, Any], result: Plan
    ) -> tuple[bool, Mapping[str, Any] | None]:
        """Write the planned status if it differs; whether it did, and the job written."""
        new = result.status.to_dict()
        if new == (body.get("status") or {}):
            return False, None
        return True, self.cluster.write_status(job=body, status=new)

    def _invalid_spec(
        self,
        body: Mapping[str, Any],
        *,
        status: JobStatus,
        error: SpecError,
        now: datetime,
        deleting: bool,
    ) -> Outcome:
        """A spec the API server accepted but we cannot run (an older CRD, a bug)."""
        metadata = body.get("metadata") or {}
        namespace = str(metadata.get("namespace", ""))
        name = str(metadata.get("name", ""))
        ref = JobRef(namespace=namespace, name=name, uid=metadata.get("uid"))
        if deleting:
            # Without a readable spec the cleanup policy is unknown: keep the data.
            self._post(ref, "Warning", Reason.CHECKPOINTS_RETAINED,
                       f"the spec is invalid ({error}); checkpoint data is kept")
            return Outcome(finalized=True)
        generation = metadata.get("generation")
        result = plan_invalid_spec(
            status=status,
            error=error,
            generation=generation if isinstance(generation, int) else 0,
            now=now,
        )
        for event in result.of_type(EmitEvent):  # the only actions of such a plan
            post_event(self.cluster, ref=ref, event=event)
        try:
            self._write_status(body, result)
        except ClusterError as exc:
            return self._failed((namespace, name), step="write-status", error=exc, job=None)
        if self.metrics is not None:
            self.metrics.record_job(namespace=namespace, name=name, phase=result.status.phase,
                                    latest_completed_at=None, store_bytes=None)
        return Outcome(phase=result.status.phase)

    def _post(self, ref: JobRef, kind: EventType, reason: Reason | PodReason,
              message: str) -> None:
        post_event(self.cluster, ref=ref,
                   event=EmitEvent(type=kind, reason=reason, message=message))

    def _failed(
        self,
        key: JobKey,
        *,
        step: str,
        error: ClusterError,
        job: CheckpointedJob | None,
    ) -> Outcome:
        """Report an error once per distinct message and retry with backoff."""
        return self._back_off(key, step=step, message=str(error), retryable=error.retryable,
                              uid=job.metadata.uid if job else None)

    def _unexpected(self, key: JobKey, *, error: Exception) -> Outcome:
        """A pass raised what no step expected (a bug, input no validation foresaw).

        It is treated like a retryable API error: a ``ReconcileError`` Warning Event on
        the job (once per distinct message) and a retry with backoff from the job's own
        loop. Letting it escape would end the loop and leave the job to kopf's fixed
        one-minute daemon restart, with nothing for the user to see on the job.
        """
        _log.exception("%s/%s: unexpected error in a reconcile pass", key[0], key[1])
        first_line = (str(error).strip().splitlines() or [""])[0]
        message = f"unexpected {type(error).__name__}: {first_line}".rstrip(": ")
        return self._back_off(key, step="unexpected", message=message, retryable=True, uid=None)

    def _back_off(
        self, key: JobKey, *, step: str, message: str, retryable: bool, uid: str | None
    ) -> Outcome:
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        if retryable:
            exponent = min(failures - 1, 62)  # the delay is capped long before this
            delay = min(self.retry.max_delay, self.retry.first_delay * 2**exponent)
        else:
            delay = self.retry.final_error_delay
        _log.warning("%s/%s: %s failed (try %d, next in %.1fs): %s",
                     key[0], key[1], step, failures, delay, message)
        if self.metrics is not None:
            self.metrics.count_error(step=step)
        if self._last_error.get(key) != message:
            self._last_error[key] = message
            self._post(JobRef(namespace=key[0], name=key[1], uid=uid), "Warning",
                       Reason.RECONCILE_ERROR, message)
        return Outcome(requeue_after=delay, error=message)

    # --- metrics -----------------------------------------------------------------------

    def _record(
        self,
        job: CheckpointedJob,
        *,
        status: JobStatus,
        reading: StoreReading | None,
        pending: ExecutionReport | None,
    ) -> None:
        metrics = self.metrics
        if metrics is None:
            return
        latest = status.latest_checkpoint
        completed = latest.completed_at if latest is not None else None
        metrics.record_job(
            namespace=job.metadata.namespace,
            name=job.metadata.name,
            phase=status.phase,
            latest_completed_at=completed.timestamp() if completed is not None else None,
            store_bytes=reading.size_bytes if reading is not None else None,
        )
        if pending is None:
            return
        created = [a for a in pending.executed if isinstance(a, CreateDriver)]
        if not created:
            return
        if status.reason in RESTART_REASONS:
            # A restart after a failure counts under the failure's reason (Killed,
            # StorageUnreachable); an upgrade or a retry under its own.
            failure = status.last_failure
            reason = (failure.reason if status.reason == Reason.RESTARTED and failure
                      else status.reason)
            metrics.count_restart(reason=reason)
        if _restores_a_checkpoint(job, status):
            metrics.count_restore()
