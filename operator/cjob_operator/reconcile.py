"""One reconciliation pass over one CheckpointedJob: observe, plan, execute, record.

Each pass starts from what the API server has *now* (the job is read fresh, its
driver pods come from the operator's pod index, a deleted job's cleanup pod is read, its checkpoint store is read), never
from the event that woke it up. ``plan`` decides; the actions are executed in order
and the pass stops at the first failing one (every action is idempotent, so the next
pass simply redoes what is still needed). The status ``plan`` returns is written only
when all actions succeeded, so the status never claims something that did not happen.

Events are the exception to "stop at the first error": an Event that cannot be posted
is logged and skipped, because losing a message must never stop a job's recovery.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cjob_lifecycle.actions import (
    Action,
    AdvanceFence,
    CreateCleanupPod,
    CreateDriver,
    CreateStandby,
    DeleteCheckpointStore,
    DeleteCleanupPod,
    DeleteDriver,
    EmitEvent,
    EnsureCheckpointConfigMap,
    EnsureNetworkPolicy,
    EnsureRole,
    EnsureRoleBinding,
    EnsureService,
    EnsureServiceAccount,
    EnsureSparkAuthSecret,
    PromoteStandby,
    RemoveFinalizer,
    RequestCheckpoint,
    RequeueAfter,
)
from cjob_lifecycle.observed import (
    CleanupPod,
    DriverPod,
    Observed,
    StoreOwnership,
    StoreView,
)
from cjob_lifecycle.plan import (
    CHECKPOINTS_RETAINED_REASON,
    Plan,
    PlanSettings,
    plan,
    plan_invalid_spec,
)
from cjob_operator.builders import (
    ROLE_DRIVER,
    build_cleanup_pod,
    build_driver_pod,
    build_driver_service,
    build_network_policy,
    build_role,
    build_role_binding,
    build_service_account,
    build_spark_auth_secret,
    build_standby_pod,
    owner_reference,
    standard_labels,
)
from cjob_operator.cluster import (
    Cluster,
    ClusterError,
    JobRef,
    Manifest,
    StatusConflictError,
    StoreReading,
)
from cjob_operator.config import OperatorConfig
from cjob_operator.metrics import OperatorMetrics
from cjob_operator.observed import observe_cleanup_pod, observe_driver_pod
from cjob_spec.errors import SpecError
from cjob_spec.model import CheckpointCleanup, CheckpointedJob
from cjob_spec.names import LABEL_JOB, checkpoint_configmap_name, cleanup_pod_name
from cjob_spec.parse import parse_job
from cjob_spec.standby_signal import StandbyPromotion
from cjob_spec.status import JobStatus, Phase

_log = logging.getLogger(__name__)

SPARK_AUTH_SECRET_BYTES = 32

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
class WatchedVersions:
    """The ``resourceVersion`` of the job and of its store as the operator's watches
    last delivered them (None: not known).

    A pass reads the job or the store from the API server only when its watch
    delivered a version the pass's last reading does not already cover; otherwise it
    plans from that reading. With a thousand jobs, every pod event and every resync
    would otherwise cost two GETs that only return what the operator already knows.
    """

    job: str | None = None
    store: str | None = None
    """None: the watch knows no such ConfigMap (the store does not exist)."""


@dataclass(frozen=True)
class ReadSettings:
    reuse_seconds: float = 600.0
    """Longest a reading is planned from while the watches report no change; then the
    pass reads again, so a watch that silently lost an event cannot hide it forever."""


@dataclass(frozen=True)
class _JobMemo:
    """A reading of the job, kept small: at a thousand jobs each kilobyte kept per job
    is a megabyte of the operator's memory. It is kept as compact JSON without
    ``metadata.managedFields`` (kilobytes the plan never reads), and decoded per pass."""

    encoded: bytes
    versions: frozenset[str]
    """Versions this body is at least as new as: the one read or written, and the one
    the watch had delivered when it was read."""
    read_at: float

    @classmethod
    def of(cls, body: Mapping[str, Any], *, versions: frozenset[str],
           read_at: float) -> _JobMemo:
        kept = dict(body)
        metadata = dict(kept.get("metadata") or {})
        metadata.pop("managedFields", None)
        kept["metadata"] = metadata
        encoded = json.dumps(kept, separators=(",", ":"), default=str).encode()
        return cls(encoded=encoded, versions=versions, read_at=read_at)

    @property
    def body(self) -> Mapping[str, Any]:
        body: Mapping[str, Any] = json.loads(self.encoded)
        return body


@dataclass(frozen=True)
class _StoreMemo:
    reading: StoreReading | None
    version: str | None
    """The store's version the watch had delivered when it was read (None: none)."""
    read_at: float


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


def _version(body: Mapping[str, Any] | None) -> str | None:
    metadata = (body or {}).get("metadata") or {}
    version = metadata.get("resourceVersion")
    return str(version) if version else None


def _acts(result: Plan) -> bool:
    """Whether the plan changes anything besides the job's status and Events."""
    return any(not isinstance(action, PASSIVE) for action in result.actions)


@dataclass(frozen=True)
class ExecutionReport:
    executed: tuple[Action, ...]
    error: ClusterError | None = None
    failed_action: Action | None = None

    @property
    def finalized(self) -> bool:
        return self.error is None and any(isinstance(a, RemoveFinalizer) for a in self.executed)


def observe_store(reading: StoreReading | None, *, job_name: str,
                  job_uid: str | None) -> StoreView:
    if reading is None:
        return StoreView(exists=False)
    return StoreView(
        exists=True,
        ownership=store_ownership(reading, job_name=job_name, job_uid=job_uid),
        latest=reading.latest,
        fence_attempt=reading.fence_attempt,
        restore_report=reading.restore_report,
        driver_lost=reading.driver_lost,
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


def _restores_a_checkpoint(job: CheckpointedJob, status: JobStatus) -> bool:
    """Whether a driver just created was asked to restore a checkpoint.

    ``status.restoredFrom`` only says so once the driver reports, so the count of
    restoring drivers goes by the request: the latest checkpoint, or one the spec names.
    """
    return status.latest_checkpoint is not None or job.spec.restore.source.kind in ("id", "path")


def observe_pods(
    manifests: Iterable[Mapping[str, Any]], *, job_name: str, job_uid: str | None
) -> tuple[DriverPod, ...]:
    """The job's driver pods among ``manifests`` (the pod index's entries for the job)."""
    pods = [
        pod
        for manifest in _own_pods(manifests, job_name=job_name, job_uid=job_uid)
        if (pod := observe_driver_pod(manifest)) is not None
    ]
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


def _own_pods(
    manifests: Iterable[Mapping[str, Any]], *, job_name: str, job_uid: str | None
) -> Iterator[Mapping[str, Any]]:
    """The pods labelled with the job's name and not owned by another object.

    Pods owned by another object of the same name (a deleted and re-created job whose
    old pods are still terminating) are left out: they belong to a different job.
    """
    for manifest in manifests:
        metadata = manifest.get("metadata") or {}
        labels = metadata.get("labels") or {}
        if labels.get(LABEL_JOB) != job_name:
            continue
        owners = metadata.get("ownerReferences") or []
        owner_uids = {owner.get("uid") for owner in owners if isinstance(owner, Mapping)}
        if job_uid and owner_uids and job_uid not in owner_uids:
            continue
        yield manifest


class ActionExecutor:
    """Carries out a plan's actions against a :class:`Cluster`, in order.

    A job's companions (ServiceAccount, Role, RoleBinding, Service, Secret,
    NetworkPolicy) are ensured at every attempt's start; sending an unchanged one
    again costs a create that answers "already exists" and a patch that changes
    nothing, seven requests per restart. So an object this executor ensured with the
    same manifest (same owner, hence the same job) less than ``reuse_seconds`` ago
    is not sent again; after that it is, so one deleted by hand comes back, and at
    once after any failed call for the job.
    """

    def __init__(self, *, cluster: Cluster, operator_config: OperatorConfig,
                 reuse_seconds: float = ReadSettings.reuse_seconds) -> None:
        self.cluster = cluster
        self.operator_config = operator_config
        self.reuse_seconds = reuse_seconds
        self._ensured: dict[tuple[str, str], dict[tuple[str, str], tuple[bytes, float]]] = {}

    def _ensure(self, job: CheckpointedJob, manifest: Manifest, *,
                same_as: Manifest | None = None) -> None:
        """Create or update ``manifest`` unless it was ensured unchanged lately.

        ``same_as`` is what decides "unchanged" when it differs from what is sent
        (a Secret's random key is not part of its identity).
        """
        metadata = manifest.get("metadata") or {}
        ensured = self._ensured.setdefault((job.metadata.namespace, job.metadata.name), {})
        key = (str(manifest.get("kind")), str(metadata.get("name")))
        fingerprint = hashlib.sha256(json.dumps(
            same_as if same_as is not None else manifest, sort_keys=True, default=str
        ).encode()).digest()
        previous = ensured.get(key)
        now = time.monotonic()
        if previous is not None and previous[0] == fingerprint \
                and now - previous[1] < self.reuse_seconds:
            return
        self.cluster.ensure_object(manifest=manifest)
        ensured[key] = (fingerprint, now)

    def forget(self, *, namespace: str, name: str) -> None:
        """Forget what was ensured for the job ``namespace/name`` (it is gone)."""
        self._ensured.pop((namespace, name), None)

    def execute(self, actions: Iterable[Action], *, job: CheckpointedJob) -> ExecutionReport:
        executed: list[Action] = []
        for action in actions:
            try:
                self.execute_one(action, job=job)
            except ClusterError as exc:
                # A refused call may come from a companion deleted by hand (a pod whose
                # ServiceAccount is gone): the next pass sends them all again.
                self.forget(namespace=job.metadata.namespace, name=job.metadata.name)
                return ExecutionReport(executed=tuple(executed), error=exc, failed_action=action)
            executed.append(action)
        return ExecutionReport(executed=tuple(executed))

    def execute_one(self, action: Action, *, job: CheckpointedJob) -> None:
        cluster = self.cluster
        namespace = job.metadata.namespace
        name = job.metadata.name
        config = self.operator_config
        if isinstance(action, EnsureCheckpointConfigMap):
            cluster.ensure_checkpoint_configmap(
                namespace=namespace,
                name=action.name,
                job_name=name,
                owner_reference=owner_reference(job),
                labels=standard_labels(job, component="checkpoint-store"),
            )
        elif isinstance(action, EnsureServiceAccount):
            self._ensure(job, build_service_account(job))
        elif isinstance(action, EnsureRole):
            self._ensure(job, build_role(job))
        elif isinstance(action, EnsureRoleBinding):
            self._ensure(job, build_role_binding(job))
        elif isinstance(action, EnsureService):
            self._ensure(job, build_driver_service(job, operator_config=config))
        elif isinstance(action, EnsureSparkAuthSecret):
            key = secrets.token_bytes(SPARK_AUTH_SECRET_BYTES)
            secret = build_spark_auth_secret(job, key=key)
            self._ensure(job, secret, same_as={k: v for k, v in secret.items() if k != "data"})
        elif isinstance(action, EnsureNetworkPolicy):
            self._ensure(job, build_network_policy(job, operator_config=config))
        elif isinstance(action, AdvanceFence):
            cluster.advance_fence(
                namespace=namespace, name=checkpoint_configmap_name(name), attempt=action.attempt
            )
        elif isinstance(action, CreateDriver):
            manifest = build_driver_pod(
                job,
                attempt=action.attempt,
                restore_pointer=action.restore_pointer,
                image=action.image,
                operator_config=config,
            )
            cluster.create_pod(manifest=manifest)
        elif isinstance(action, CreateStandby):
            cluster.create_pod(manifest=build_standby_pod(
                job, attempt=action.attempt, image=action.image, operator_config=config))
        elif isinstance(action, PromoteStandby):
            cluster.promote_standby(
                namespace=namespace, store=checkpoint_configmap_name(name), role=ROLE_DRIVER,
                promotion=StandbyPromotion(attempt=action.attempt,
                                           restore=action.restore_pointer, pod=action.name))
        elif isinstance(action, DeleteDriver):
            cluster.delete_pod(namespace=namespace, name=action.name, force=action.force)
        elif isinstance(action, RequestCheckpoint):
            cluster.request_checkpoint(
                namespace=namespace, name=checkpoint_configmap_name(name), nonce=action.nonce
            )
        elif isinstance(action, EmitEvent):
            self._post_event(job, action)
        elif isinstance(action, CreateCleanupPod):
            cluster.create_pod(manifest=build_cleanup_pod(
                job, uri=action.uri, image=action.image,
                deadline_seconds=action.deadline_seconds, operator_config=config,
            ))
        elif isinstance(action, DeleteCleanupPod):
            cluster.delete_pod(namespace=namespace, name=action.name, force=False)
        elif isinstance(action, DeleteCheckpointStore):
            cluster.delete_configmap(namespace=namespace, name=action.name)
        elif isinstance(action, RemoveFinalizer | RequeueAfter):
            pass  # carried out by the caller (kopf removes its finalizer, the loop waits)
        else:  # pragma: no cover - the Action union is exhaustive
            raise TypeError(f"unknown action {action!r}")

    def _post_event(self, job: CheckpointedJob, action: EmitEvent) -> None:
        ref = JobRef(namespace=job.metadata.namespace, name=job.metadata.name, uid=job.metadata.uid)
        try:
            self.cluster.post_event(
                job=ref, type=action.type, reason=action.reason, message=action.message
            )
        except ClusterError as exc:
            _log.warning("%s/%s: event %s not posted: %s", ref.namespace, ref.name,
                         action.reason, exc)


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
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._failures: dict[tuple[str, str], int] = {}
        self._last_error: dict[tuple[str, str], str] = {}
        self._jobs: dict[tuple[str, str], _JobMemo] = {}
        self._stores: dict[tuple[str, str], _StoreMemo] = {}

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
                self._drop_readings(key)
                outcome = self._unexpected(key, error=exc)
            finally:
                if self.metrics is not None:
                    self.metrics.reconcile_seconds.observe(time.monotonic() - started)
        if outcome.gone or outcome.finalized:
            self._forget(key)
        return outcome

    def _lock_for(self, key: tuple[str, str]) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def _forget(self, key: tuple[str, str]) -> None:
        with self._locks_guard:
            self._locks.pop(key, None)
        self._failures.pop(key, None)
        self._last_error.pop(key, None)
        self._drop_readings(key)
        self.executor.forget(namespace=key[0], name=key[1])
        if self.metrics is not None:
            self.metrics.forget_job(namespace=key[0], name=key[1])

    def _drop_readings(self, key: tuple[str, str]) -> None:
        self._jobs.pop(key, None)
        self._stores.pop(key, None)

    # --- reading, or planning from the last reading ----------------------------------------

    def _fresh(self, read_at: float) -> bool:
        return time.monotonic() - read_at < self.reads.reuse_seconds

    def _read_job(
        self, key: tuple[str, str], watched: WatchedVersions | None, *, reuse: bool
    ) -> tuple[Mapping[str, Any] | None, bool]:
        """The job, and whether it came from the last reading instead of the API."""
        memo = self._jobs.get(key)
        seen = watched.job if watched is not None else None
        if reuse and memo is not None and seen is not None and seen in memo.versions \
                and self._fresh(memo.read_at):
            return memo.body, True
        body = self.cluster.read_job(namespace=key[0], name=key[1])
        versions = {v for v in (_version(body), seen) if v}
        if body is None or not versions:
            self._jobs.pop(key, None)
        else:
            self._jobs[key] = _JobMemo.of(body, versions=frozenset(versions),
                                          read_at=time.monotonic())
        return body, False

    def _read_store(
        self, key: tuple[str, str], watched: WatchedVersions | None, *, reuse: bool
    ) -> tuple[StoreReading | None, bool]:
        """The job's store, and whether it came from the last reading instead of the API."""
        memo = self._stores.get(key)
        if reuse and memo is not None and watched is not None \
                and watched.store == memo.version and self._fresh(memo.read_at):
            return memo.reading, True
        reading = self.cluster.read_store(
            namespace=key[0], name=checkpoint_configmap_name(key[1])
        )
        if watched is None:
            self._stores.pop(key, None)
        else:
            self._stores[key] = _StoreMemo(reading=reading, version=watched.store,
                                           read_at=time.monotonic())
        return reading, False

    def _remember_written(self, key: tuple[str, str], written: Mapping[str, Any] | None) -> None:
        """The job as the status write left it is what the next pass plans from."""
        memo = self._jobs.get(key)
        version = _version(written)
        if memo is None or written is None or version is None:
            self._jobs.pop(key, None)
            return
        self._jobs[key] = _JobMemo.of(written, versions=memo.versions | {version},
                                      read_at=memo.read_at)

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
            self._stores.pop(key, None)
        if report.error is not None:
            self._drop_readings(key)
            step = type(report.failed_action).__name__ if report.failed_action else "execute"
            if isinstance(report.failed_action, CreateDriver) and not report.error.retryable:
                self._record_refused_driver(body, result, report.error)
            failed = report.failed_action
            if isinstance(failed, CreateCleanupPod) and not report.error.retryable:
                return self._cleanup_refused(job, failed, report.error)
            return self._failed(key, step=step, error=report.error, job=job)
        if report.finalized:
            self._record(job, status=result.status, reading=reading, pending=None)
            return Outcome(finalized=True, phase=result.status.phase)
        try:
            wrote, written = self._write_status(body, result)
        except StatusConflictError as exc:
            self._drop_readings(key)
            _log.info("%s/%s: %s; planning again", namespace, name, exc)
            return Outcome(requeue_after=self.retry.conflict_delay, error=str(exc))
        except ClusterError as exc:
            self._drop_readings(key)
            return self._failed(key, step="write-status", error=exc, job=job)
        if wrote:
            self._remember_written(key, written)
        self._record(job, status=result.status, reading=reading, pending=report)
        self._failures.pop(key, None)
        self._last_error.pop(key, None)
        return Outcome(requeue_after=result.requeue_after, phase=result.status.phase)

    def _plan(
        self, key: tuple[str, str], *, pods: list[Mapping[str, Any]],
        watched: WatchedVersions | None, reuse: bool,
    ) -> _Planned | Outcome:
        """Observe and plan; the Outcome of a pass that ends before planning.

        With ``reuse`` the job and the store are remembered instead of read when the
        watches allow it.
        """
        namespace, name = key
        try:
            body, job_remembered = self._read_job(key, watched, reuse=reuse)
        except ClusterError as exc:
            return self._failed(key, step="read-job", error=exc, job=None)
        if body is None:
            return Outcome(gone=True)
        metadata = body.get("metadata") or {}
        deleting = bool(metadata.get("deletionTimestamp"))
        status = JobStatus.from_dict(body.get("status"))
        now = self.clock()
        try:
            job = parse_job(body)
        except SpecError as exc:
            self._drop_readings(key)
            return self._invalid_spec(body, status=status, error=exc, now=now, deleting=deleting)
        try:
            reading, store_remembered = self._read_store(key, watched, reuse=reuse)
        except ClusterError as exc:
            return self._failed(key, step="read-store", error=exc, job=job)
        cleanup: list[Mapping[str, Any]] = []
        if deleting and job.spec.cleanup_policy.checkpoints is CheckpointCleanup.DELETE:
            # Read, not indexed: only a job being deleted has one, for a few seconds.
            try:
                found = self.cluster.read_pod(namespace=namespace, name=cleanup_pod_name(name))
            except ClusterError as exc:
                return self._failed(key, step="read-cleanup-pod", error=exc, job=job)
            cleanup = [found] if found is not None else []
        observed = Observed(
            job=job,
            status=status,
            pods=observe_pods(pods, job_name=name, job_uid=job.metadata.uid),
            cleanup_pod=observe_cleanup(cleanup, job_name=name, job_uid=job.metadata.uid),
            store=observe_store(reading, job_name=name, job_uid=job.metadata.uid),
            deleting=deleting,
            default_image=self.operator_config.default_image,
        )
        return _Planned(body=body, job=job, reading=reading,
                        result=plan(observed, now=now, settings=self.plan_settings),
                        remembered=job_remembered or store_remembered)

    def _cleanup_refused(
        self, job: CheckpointedJob, action: CreateCleanupPod, error: ClusterError
    ) -> Outcome:
        """The API server refused the cleanup pod for good (a quota, an admission policy).

        Retrying cannot help and a deletion must never be held forever: the data is
        kept, the Warning says where and why, and the job goes.
        """
        ref = JobRef(namespace=job.metadata.namespace, name=job.metadata.name,
                     uid=job.metadata.uid)
        self._post(ref, "Warning", CHECKPOINTS_RETAINED_REASON,
                   f"checkpoint data under {action.uri} kept: {error}; delete it with the "
                   f"job's credentials")
        return Outcome(finalized=True)

    def _record_refused_driver(
        self, body: Mapping[str, Any], result: Plan, error: ClusterError
    ) -> None:
        """The API server refused the driver pod for good (a quota, an admission policy).

        The attempt is recorded as started anyway: the plan then sees its pod missing
        after the grace period and applies the restart policy, so a job whose pods are
        refused ends Failed after ``maxRestarts`` instead of retrying forever.
        """
        status = result.status.replace(reason="DriverCreateFailed", message=str(error))
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
            self._post(ref, "Warning", "CheckpointsRetained",
                       f"the spec is invalid ({error}); checkpoint data is kept")
            return Outcome(finalized=True)
        generation = metadata.get("generation")
        result = plan_invalid_spec(
            status=status,
            error=error,
            generation=generation if isinstance(generation, int) else 0,
            now=now,
        )
        for action in result.actions:
            if isinstance(action, EmitEvent):
                self._post(ref, action.type, action.reason, action.message)
        try:
            self._write_status(body, result)
        except ClusterError as exc:
            return self._failed((namespace, name), step="write-status", error=exc, job=None)
        if self.metrics is not None:
            self.metrics.record_job(namespace=namespace, name=name, phase=result.status.phase,
                                    latest_completed_at=None, store_bytes=None)
        return Outcome(phase=result.status.phase)

    def _post(self, ref: JobRef, kind: str, reason: str, message: str) -> None:
        try:
            self.cluster.post_event(job=ref, type=kind, reason=reason, message=message)
        except ClusterError as exc:
            _log.warning("%s/%s: event %s not posted: %s", ref.namespace, ref.name, reason, exc)

    def _failed(
        self,
        key: tuple[str, str],
        *,
        step: str,
        error: ClusterError,
        job: CheckpointedJob | None,
    ) -> Outcome:
        """Report an error once per distinct message and retry with backoff."""
        return self._back_off(key, step=step, message=str(error), retryable=error.retryable,
                              uid=job.metadata.uid if job else None)

    def _unexpected(self, key: tuple[str, str], *, error: Exception) -> Outcome:
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
        self, key: tuple[str, str], *, step: str, message: str, retryable: bool, uid: str | None
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
                       "ReconcileError", message)
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
        if status.reason in ("Restarted", "Upgraded", "Retrying"):
            failure = status.last_failure
            reason = failure.reason if status.reason == "Restarted" and failure else status.reason
            metrics.count_restart(reason=reason)
        if _restores_a_checkpoint(job, status):
            metrics.count_restore()
