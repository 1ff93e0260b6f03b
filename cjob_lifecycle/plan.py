"""The decision about one CheckpointedJob: an observation in, actions and the new
status out. The operator runs it against the Kubernetes API and ``cjob run`` against
local driver processes and a file store, so both follow this one lifecycle.

``plan`` is pure and is called on every reconciliation pass. It never sleeps: a wait
(restart backoff, a final checkpoint before suspending, a previous driver still
shutting down) becomes a ``RequeueAfter``. The status is rebuilt on every pass from the
previous status and what is observed, so a lost status update only delays a step.

Lifecycle of a job (``status.phase``)::

    (new) --start--> Pending --driver runs--> Running --exit 0--> Succeeded
                        |                        |
                        +---- failure -----------+--> Restarting --backoff--> Pending ...
                        |                                  |
                        +-- permanent / limit / Never -----+--> Failed
    suspend: Running --final checkpoint--> Suspended --resume--> Pending (latest checkpoint)
    spec change while Pending/Running: Restarting (Upgrading) --old driver gone--> Pending

With a ready standby (``spec.standby``), Restarting passes without the backoff: the
standby is promoted in the same pass. It may also end the attempt first: its report
that the driver is gone (``cjob_spec.driver_beacon``) arrives before the kubelet's.

Each attempt n runs in pod ``<job>-attempt-<n>``. Before creating it, the checkpoint
store's fence is advanced to n, so older attempts (a zombie on a lost node) can no
longer write. A new attempt restores from ``latest`` when the store holds a
checkpoint, otherwise from ``spec.restore.from``. It runs ``spec.image``, or the
operator's runtime image when the spec names none; with neither, the job is Failed
(reason ``NoImage``) until the spec or the operator provides one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

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
    EventType,
    PromoteStandby,
    RemoveFinalizer,
    RequestCheckpoint,
    RequeueAfter,
)
from cjob_lifecycle.observed import CleanupPod, DriverPod, Observed, StoreOwnership
from cjob_spec.driver_beacon import DriverLost
from cjob_spec.errors import SpecError
from cjob_spec.exit_codes import describe_exit, reason_for_exit
from cjob_spec.model import (
    CheckpointCleanup,
    CheckpointedJob,
    ephemeral_storage_problem,
    spec_hash,
)
from cjob_spec.names import (
    checkpoint_configmap_name,
    cleanup_pod_name,
    driver_pod_name,
    driver_service_name,
    job_checkpoint_dir,
    network_policy_name,
    role_binding_name,
    role_name,
    service_account_name,
    spark_auth_secret_name,
    standby_pod_name,
)
from cjob_spec.restart import (
    AttemptEnd,
    Finish,
    GiveUp,
    Restart,
    RestartDecision,
    decide_restart,
)
from cjob_spec.status import (
    CheckpointRef,
    ConditionStatus,
    ConditionType,
    FailureRecord,
    JobStatus,
    Phase,
    RestoredFrom,
    set_condition,
)
from cjob_spec.times import format_time, to_utc, truncate_to_seconds

_A = TypeVar("_A")

POD_FAILURE_REASONS = frozenset({"OOMKilled", "Evicted", "DeadlineExceeded", "ContainerCannotRun"})
"""Pod or container reasons more telling than the exit code's."""
NO_IMAGE_REASON = "NoImage"
DRIVER_LOST_REASON = "DriverLost"
"""A ready standby reports the active driver gone (:mod:`cjob_spec.driver_beacon`)."""
STORE_LOST_REASON = "StoreLost"
STORE_CONFLICT_REASON = "StoreConflict"
WAITING_FOR_PREVIOUS_STORE_REASON = "WaitingForPreviousStore"
STORE_GC_RECHECK_SECONDS = 5.0
STORE_CONFLICT_RECHECK_SECONDS = 30.0
"""How often a job blocked by a store that is not its own looks again: the operator
does not watch ConfigMaps, and the garbage collector (soon) or the user frees it."""
RESTORED_FROM_FALLBACK_REASON = "RestoredFromFallback"
NO_IMAGE_MESSAGE = (
    "spec.image is not set and the operator has no default runtime image: set spec.image, "
    "or install the operator with one (chart value runtimeImage.repository, "
    "flag --runtime-image)"
)


@dataclass(frozen=True)
class PlanSettings:
    """Timing knobs of the operator (not of the job)."""

    pod_appear_grace_seconds: float = 30.0
    """A just-created driver pod missing from the observation for less than this is
    assumed to be in flight (watch caches lag), not lost."""
    kill_grace_seconds: float = 30.0
    """A pod still terminating this long after its deletion deadline no longer blocks
    the next attempt (its node is probably gone; the fence keeps it harmless)."""
    poll_seconds: float = 5.0
    """Requeue delay while waiting for something that emits no event of its own."""
    standby_retry_seconds: float = 60.0
    """A standby driver that failed is replaced this long after it ended, not at once:
    one that cannot start (a refused watch, a bad image) would otherwise start a JVM
    every few seconds. The failed pod is kept meanwhile, for its logs."""
    resync_seconds: float = 60.0
    """Longest time between two passes over a job that is not finished."""
    keep_finished_attempts: int = 3
    """Finished driver pods kept for their logs (older ones are deleted)."""
    cleanup_deadline_seconds: int = 600
    """How long the cleanup pod of a deleted job may run (its ``activeDeadlineSeconds``);
    a pod not finished ``kill_grace_seconds`` after that keeps the data."""
    network_policies: bool = True
    """Give each job a NetworkPolicy admitting only its own pods (``--no-network-policies``
    turns it off, for clusters that manage policies themselves)."""


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    status: JobStatus

    @property
    def requeue_after(self) -> float | None:
        return next(
            (action.seconds for action in self.actions if isinstance(action, RequeueAfter)), None
        )

    def of_type(self, kind: type[_A]) -> list[_A]:
        return [action for action in self.actions if isinstance(action, kind)]


class _Draft:
    """The plan being built during one pass."""

    def __init__(self, observed: Observed, now: datetime, settings: PlanSettings) -> None:
        self.observed = observed
        self.job: CheckpointedJob = observed.job
        self.now = to_utc(now)
        self.settings = settings
        self.status = observed.status
        self.actions: list[Action] = []
        self.deadlines: list[datetime] = []
        self.deleted: set[str] = set()
        self.promoted: str | None = None

    def act(self, action: Action) -> None:
        if action not in self.actions:
            self.actions.append(action)

    def event(self, kind: EventType, reason: str, message: str) -> None:
        self.act(EmitEvent(type=kind, reason=reason, message=message))

    def requeue_at(self, moment: datetime) -> None:
        self.deadlines.append(to_utc(moment))

    def requeue_in(self, seconds: float) -> None:
        self.deadlines.append(self.now + timedelta(seconds=seconds))

    def set(self, **changes: object) -> None:
        self.status = self.status.replace(**changes)

    @property
    def name(self) -> str:
        return self.job.metadata.name

    def seconds_since(self, moment: datetime) -> float:
        return (self.now - to_utc(moment)).total_seconds()

    def build(self) -> Plan:
        actions = list(self.actions)
        if self.deadlines:
            delay = max(0.0, (min(self.deadlines) - self.now).total_seconds())
            actions.append(RequeueAfter(seconds=round(delay, 3)))
        return Plan(actions=tuple(actions), status=self.status)


def plan(observed: Observed, *, now: datetime, settings: PlanSettings | None = None) -> Plan:
    """Decide what to do about one CheckpointedJob (see the module docstring)."""
    draft = _Draft(observed, now, settings or PlanSettings())
    # A store that is not the job's own says nothing about the job.
    own = observed.store.latest if observed.store.is_own else None
    latest = own or observed.status.latest_checkpoint
    draft.set(observed_generation=observed.generation, latest_checkpoint=latest)
    if observed.deleting:
        _plan_deletion(draft)
    else:
        _clean_up_other_attempts(draft)
        _complete_lost_driver_failure(draft)
        _run_state_machine(draft)
        _manage_standby(draft)
        _take_restore_report(draft)
        _set_conditions(draft)
        if draft.status.phase is not None and not draft.status.phase.is_terminal:
            draft.requeue_in(draft.settings.resync_seconds)
    return draft.build()


def plan_invalid_spec(
    *, status: JobStatus, error: SpecError, generation: int, now: datetime
) -> Plan:
    """The spec of generation ``generation`` does not parse: report it, touch nothing.

    A running driver keeps running on its last valid spec; a job that never started is
    marked Failed. Fixing the spec (a new generation) lets ``plan`` take over again.
    """
    message = f"invalid spec: {error}"
    changed = status.message != message or status.observed_generation != generation
    actions: list[Action] = []
    if changed:
        actions.append(EmitEvent(type="Warning", reason="InvalidSpec", message=message))
    new = status.replace(observed_generation=generation, message=message)
    if status.phase is None or status.phase is Phase.FAILED:
        new = new.replace(phase=Phase.FAILED, reason="InvalidSpec", spec_hash=None)
    conditions = new.conditions
    conditions = set_condition(
        conditions,
        kind=ConditionType.READY,
        status=ConditionStatus.TRUE if new.phase is Phase.RUNNING else ConditionStatus.FALSE,
        reason="InvalidSpec",
        message=message,
        now=now,
        observed_generation=generation,
    )
    if new.phase is Phase.FAILED:
        conditions = set_condition(
            conditions,
            kind=ConditionType.FAILED,
            status=ConditionStatus.TRUE,
            reason="InvalidSpec",
            message=message,
            now=now,
            observed_generation=generation,
        )
    return Plan(actions=tuple(actions), status=new.replace(conditions=conditions))


# --- what the driver restored -----------------------------------------------------


def _take_restore_report(draft: _Draft) -> None:
    """Set ``restoredFrom`` from the current attempt's report; warn once on a fallback.

    Only the driver knows what it restored (it may fall back to an older checkpoint
    when ``spec.restore.onUnreadable`` allows it), so ``restoredFrom`` stays unset
    from the start of an attempt until its driver's report is in the store. A report
    of another attempt is about an earlier driver and is ignored. The Event goes with
    the change of ``restoredFrom``, which the status records, so it is posted once.
    """
    report = draft.observed.store.restore_report if draft.observed.store.is_own else None
    if report is None or report.attempt < 1 or report.attempt != draft.status.attempt:
        return
    restored = report.checkpoint
    reported = None if restored is None else RestoredFrom(id=restored.id, path=restored.path)
    if reported == draft.status.restored_from:
        return
    draft.set(restored_from=reported)
    skipped = report.fallback_from
    if restored is not None and skipped is not None:
        draft.event(
            "Warning",
            RESTORED_FROM_FALLBACK_REASON,
            f"attempt {report.attempt} restored checkpoint {restored.id} ({restored.path}) "
            f"because the newer checkpoint {skipped.id} ({skipped.path}) is unreadable "
            f"(spec.restore.onUnreadable: FallbackToPrevious); the records processed after "
            f"checkpoint {restored.id} are processed again",
        )


# --- helpers over pods -------------------------------------------------------------


def _current_pod(draft: _Draft) -> DriverPod | None:
    status = draft.status
    if status.attempt < 1:
        return None
    return draft.observed.pod(status.driver_pod or driver_pod_name(draft.name, status.attempt))


def _is_blocking(draft: _Draft, pod: DriverPod) -> bool:
    """Whether ``pod`` may still be running a driver that the next attempt must not overlap.

    Pods in phase Unknown never block (their node is gone); terminating pods stop
    blocking ``kill_grace_seconds`` after their deletion deadline.
    """
    if not pod.is_live:
        return False
    if pod.deletion_timestamp is None:
        return True
    return draft.seconds_since(pod.deletion_timestamp) < draft.settings.kill_grace_seconds


def _delete(draft: _Draft, pod: DriverPod, reason: str) -> None:
    """Delete a driver pod that may still run, once per pass (the first reason wins)."""
    if pod.is_terminating or pod.is_finished or pod.name in draft.deleted:
        return
    draft.deleted.add(pod.name)
    draft.act(DeleteDriver(name=pod.name, reason=reason, force=pod.phase == "Unknown"))


def _clean_up_other_attempts(draft: _Draft) -> None:
    """Stop drivers of other attempts and prune old finished pods."""
    current = draft.status.attempt
    for pod in draft.observed.pods:
        if pod.attempt == current or pod.standby:
            continue
        if pod.is_live and _left_to_end(draft, pod):
            continue
        if pod.is_live or pod.phase == "Unknown":
            _delete(draft, pod, "StaleAttempt")
        elif pod.attempt <= current - draft.settings.keep_finished_attempts:
            _delete_finished(draft, pod)


def _delete_finished(draft: _Draft, pod: DriverPod) -> None:
    if not pod.is_terminating and pod.name not in draft.deleted:
        draft.deleted.add(pod.name)
        draft.act(DeleteDriver(name=pod.name, reason="PrunedHistory"))


def _wait_for_blocking_pods(draft: _Draft, reason: str, *, standby_too: bool = False,
                            unless: frozenset[str] = frozenset(), wait: bool = True) -> bool:
    """Delete live driver pods; True (and a requeue) if some must still be waited for.

    A standby driver never overlaps an attempt (it writes nothing until promoted, and
    its promotion fences the attempt before it), so only the job's deletion waits for it.
    Pods named in ``unless`` are neither deleted nor waited for; with ``wait`` False the
    others are deleted but not waited for.
    """
    pods = [pod for pod in draft.observed.pods
            if (standby_too or not pod.standby) and pod.name not in unless]
    blocking = [pod for pod in pods if _is_blocking(draft, pod)]
    for pod in pods:
        if pod.is_live or pod.phase == "Unknown":
            _delete(draft, pod, reason)
    if blocking and wait:
        draft.requeue_in(draft.settings.poll_seconds)
        return True
    return False


# --- the state machine ---------------------------------------------------------------


def _run_state_machine(draft: _Draft) -> None:
    # A handler returns True when it moved the job to a phase whose handler should run
    # in the same pass (for example: a failed attempt whose backoff is already over).
    for _ in range(4):
        phase = draft.status.phase
        if phase is None:
            advance = _on_new(draft)
        elif phase in (Phase.PENDING, Phase.RUNNING):
            advance = _on_active(draft)
        elif phase is Phase.RESTARTING:
            advance = _on_restarting(draft)
        elif phase is Phase.SUSPENDED:
            advance = _on_suspended(draft)
        elif phase is Phase.FAILED:
            advance = _on_failed(draft)
        else:
            advance = False
        if not advance:
            return


def _on_new(draft: _Draft) -> bool:
    if draft.job.spec.suspend:
        draft.set(
            phase=Phase.SUSPENDED,
            reason="Suspended",
            message="created suspended; set spec.suspend to false to start",
        )
        draft.event("Normal", "Suspended", "created suspended")
        return False
    _start_attempt(draft, reason="Started", reset_restarts=True)
    return False


def _start_attempt(draft: _Draft, *, reason: str, reset_restarts: bool) -> None:
    """Create the next attempt's driver once no earlier driver can overlap it.

    A ready standby takes over without waiting for the earlier drivers to stop: the
    fence moves to the new attempt before its promotion, so none of them can complete
    a checkpoint or commit output after it, and a standby's Spark runs apart from
    theirs (its executors reach it at its own address). Waiting would cost the
    takeover the seconds a pod takes to stop, or, for a pod whose node is gone, the
    whole kill grace.
    """
    standby = _ready_standby(draft)  # only non-standby pods are stopped below
    if _wait_for_blocking_pods(draft, "Superseded", unless=_lost_to_standby(draft),
                               wait=standby is None):
        if draft.status.phase is None:
            draft.set(reason="WaitingForPreviousDriver")
        draft.set(message="waiting for the previous driver pod to stop")
        return
    observed = draft.observed
    job = draft.job
    image = observed.image
    if image is None:
        _fail_without_image(draft)
        return
    attempt = 1 + max(
        [draft.status.attempt, observed.store.fence_attempt or 0]
        + [pod.attempt for pod in observed.pods]
    )
    if observed.store.exists and observed.store.ownership is not StoreOwnership.THIS_JOB:
        _refuse_foreign_store(draft)
        return
    latest = draft.status.latest_checkpoint
    source = job.spec.restore.source
    lost = _lost_checkpoint(draft)
    if lost is not None and source.kind != "path":
        _fail_store_lost(draft, lost)
        return
    # ``origin`` is what the driver is asked for; what it restored (it may fall back)
    # becomes ``restoredFrom`` only when it reports (``_take_restore_report``).
    if latest is not None and lost is None:
        pointer = "latest"
        origin = f"checkpoint {latest.id}"
    else:
        pointer = source.pointer
        if source.kind == "id":
            origin = f"checkpoint {source.checkpoint_id}"
        elif source.kind == "path":
            origin = str(source.path)
        else:
            origin = "an empty state"
    pod_name = driver_pod_name(draft.name, attempt)
    if not observed.store.exists:
        draft.act(EnsureCheckpointConfigMap(name=checkpoint_configmap_name(draft.name)))
    draft.act(EnsureServiceAccount(name=service_account_name(draft.name)))
    draft.act(EnsureRole(name=role_name(draft.name)))
    draft.act(EnsureRoleBinding(name=role_binding_name(draft.name)))
    if job.spec.spark.is_kubernetes:
        draft.act(EnsureService(name=driver_service_name(draft.name)))
        draft.act(EnsureSparkAuthSecret(name=spark_auth_secret_name(draft.name)))
    if draft.settings.network_policies:
        draft.act(EnsureNetworkPolicy(name=network_policy_name(draft.name)))
    draft.act(AdvanceFence(attempt=attempt))
    if standby is not None:
        pod_name = standby.name
        draft.promoted = pod_name
        draft.act(PromoteStandby(name=pod_name, attempt=attempt, restore_pointer=pointer))
        message = f"promoted standby driver {pod_name} to attempt {attempt} from {origin}"
    else:
        draft.act(CreateDriver(name=pod_name, attempt=attempt, restore_pointer=pointer,
                               image=image))
        message = f"started attempt {attempt} (pod {pod_name}) from {origin}"
    draft.event("Normal", reason, message)
    problem = ephemeral_storage_problem(job.spec)
    if problem is not None:
        draft.event("Warning", "CheckpointsNotPersistent", problem)
    draft.set(
        phase=Phase.PENDING,
        reason=reason,
        message=message,
        attempt=attempt,
        restarts=0 if reset_restarts else draft.status.restarts,
        driver_pod=pod_name,
        spec_hash=spec_hash(job),
        started_at=truncate_to_seconds(draft.now),
        running_since=None,
        last_restart_at=truncate_to_seconds(draft.now) if attempt > 1 else None,
        next_restart_at=None,
        restored_from=None,
        suspend_requested_at=None,
    )
    draft.requeue_in(draft.settings.pod_appear_grace_seconds)


def _ready_standby(draft: _Draft) -> DriverPod | None:
    """A standby driver that can take the next attempt now: running, ready, not being
    stopped, and started for the current spec (an outdated one would run old code)."""
    if not draft.job.spec.standby.enabled:
        return None
    current = spec_hash(draft.job)
    ready = [pod for pod in draft.observed.pods
             if pod.standby and pod.ready and pod.phase == "Running" and not pod.is_terminating
             and pod.name not in draft.deleted and (pod.spec_hash or current) == current]
    return max(ready, key=lambda pod: pod.attempt) if ready else None


def _manage_standby(draft: _Draft) -> None:
    """Keep one standby driver while the job is active and asks for one; stop the rest.

    A standby is started for the spec of its time: after a spec change it is replaced,
    as is one that exited. The one promoted in this pass is the attempt's driver now.
    While the job restarts, the standby it has is kept (not started anew): it takes
    over once ready, at the end of the backoff or as soon as the old driver is gone.
    """
    phase = draft.status.phase
    restarting = phase is Phase.RESTARTING
    wanted = (draft.job.spec.standby.enabled
              and phase in (Phase.PENDING, Phase.RUNNING, Phase.RESTARTING))
    current = spec_hash(draft.job)
    keep: DriverPod | None = None
    retry_in = 0.0
    for pod in draft.observed.pods:
        if not pod.standby or pod.name == draft.promoted:
            continue
        usable = pod.is_live and not pod.is_terminating and (pod.spec_hash or current) == current
        if wanted and usable and keep is None:
            keep = pod
        elif pod.is_live:
            _delete(draft, pod, "StandbyNotNeeded" if not wanted else "StandbyOutdated")
        elif wanted and pod.phase == "Failed" and pod.finished_at is not None and (
                wait := draft.settings.standby_retry_seconds
                - draft.seconds_since(pod.finished_at)) > 0:
            retry_in = max(retry_in, wait)
        else:
            if pod.phase == "Failed" and not pod.is_terminating and pod.name not in draft.deleted:
                why = f": {pod.message}" if pod.message else ""
                draft.event("Warning", "StandbyFailed", f"standby driver {pod.name} failed, "
                            f"{describe_exit(pod.exit_code)}{why}; a new one is started")
            _delete_finished(draft, pod)
    if restarting:
        return
    image = draft.observed.image
    if wanted and keep is None and retry_in > 0:
        draft.requeue_in(retry_in)
    elif wanted and keep is None and image is not None:
        name = standby_pod_name(draft.name, draft.status.attempt)
        if draft.observed.pod(name) is None:
            draft.act(CreateStandby(name=name, attempt=draft.status.attempt, image=image))
        else:
            draft.requeue_in(draft.settings.poll_seconds)  # its old pod goes first


def _lost_checkpoint(draft: _Draft) -> CheckpointRef | None:
    """The completed checkpoint the job's status records but its store no longer does.

    The store (the ``<job>-checkpoints`` ConfigMap) only ever moves forward, so a
    missing or emptied store, or one whose newest checkpoint is older than the one the
    status recorded, was lost: deleted by hand, by a garbage collector or by another
    job's driver. Restarting with ``--restore latest`` would then start from nothing,
    count checkpoint ids from 1 again and replay the whole input into the output.
    """
    recorded = draft.observed.status.latest_checkpoint
    if recorded is None:
        return None
    store = draft.observed.store
    if store.exists and store.latest is not None and store.latest.id >= recorded.id:
        return None
    return recorded


def _fail_store_lost(draft: _Draft, lost: CheckpointRef) -> None:
    """Refuse to start from an empty state; say how to resume from the checkpoint."""
    _fail_before_start(
        draft,
        reason=STORE_LOST_REASON,
        message=(
            f"the checkpoint store {checkpoint_configmap_name(draft.name)} no longer records "
            f"checkpoint {lost.id}, which this job completed; not starting from an empty "
            f"state. To resume from it, set spec.restore.from to {lost.path}"
        ),
    )


def _refuse_foreign_store(draft: _Draft) -> None:
    """The job's store name is taken by a ConfigMap that is not the job's: never adopt it.

    Adopting it would restore another job's checkpoints (refused by the driver) or,
    worse, let the garbage collector delete the store under the running job, since it
    still names its deleted owner. A deleted job's store goes away by itself: wait. Any
    other owner needs the user: fail with what to do, and look again now and then.
    """
    name = checkpoint_configmap_name(draft.name)
    if draft.observed.store.ownership is StoreOwnership.DELETED_JOB:
        draft.requeue_in(STORE_GC_RECHECK_SECONDS)
        if draft.status.phase is None:
            draft.set(reason=WAITING_FOR_PREVIOUS_STORE_REASON)
        draft.set(message=f"waiting for the garbage collector to delete the checkpoint store "
                          f"{name} of a deleted job of the same name")
        return
    draft.requeue_in(STORE_CONFLICT_RECHECK_SECONDS)
    latest = draft.observed.store.latest
    resume = (
        f"; to continue from its latest checkpoint, delete it and set spec.restore.from to "
        f"{latest.path} and spec.restore.allowForeignJob to true"
        if latest is not None else ""
    )
    _fail_before_start(
        draft,
        reason=STORE_CONFLICT_REASON,
        message=(
            f"the ConfigMap {name} exists but is not this job's checkpoint store (it is not "
            f"owned by this CheckpointedJob); delete it to start the job{resume}"
        ),
    )


def _fail_without_image(draft: _Draft) -> None:
    """No image to run the driver in: a permanent failure until the spec names one or
    the operator gets a default (``_on_failed`` then starts the job)."""
    _fail_before_start(draft, reason=NO_IMAGE_REASON, message=NO_IMAGE_MESSAGE)


def _fail_before_start(draft: _Draft, *, reason: str, message: str) -> None:
    """A permanent failure found before an attempt could start: no restart budget is
    spent, and ``_on_failed`` starts the job once what was missing arrives.

    A driver still running here is one a standby reported lost (every other was
    stopped before the attempt could start): it must not run on in a failed job.
    """
    for pod in draft.observed.pods:
        if not pod.standby and pod.is_live:
            _delete(draft, pod, reason)
    draft.set(
        phase=Phase.FAILED,
        reason=reason,
        message=message,
        spec_hash=spec_hash(draft.job),
        next_restart_at=None,
        last_failure=FailureRecord(
            reason=reason,
            message=message,
            at=truncate_to_seconds(draft.now),
            attempt=draft.status.attempt or None,
        ),
    )
    draft.event("Warning", reason, f"the job failed: {message}")


def _on_active(draft: _Draft) -> bool:
    """Pending or Running: watch the current attempt's driver pod."""
    pod = _current_pod(draft)
    if draft.job.spec.suspend:
        return _suspend_active(draft, pod)
    if pod is None:
        started = draft.status.started_at
        grace = draft.settings.pod_appear_grace_seconds
        if started is not None and draft.seconds_since(started) < grace:
            draft.requeue_at(to_utc(started) + timedelta(seconds=grace))
            return False
        name = draft.status.driver_pod or driver_pod_name(draft.name, draft.status.attempt)
        missing = AttemptEnd(
            reason="DriverPodMissing",
            exit_code=None,
            at=draft.now,
            message=f"driver pod {name} disappeared",
        )
        return _attempt_ended(draft, None, missing)
    end = _pod_end(draft, pod) or _reported_lost(draft, pod)
    if end is not None:
        return _attempt_ended(draft, pod, end)
    if _spec_changed(draft, pod):
        return _upgrade(draft, pod)
    if pod.started_at is None or pod.phase == "Pending":
        return _watch_start(draft, pod)
    return _watch_running(draft, pod)


def _pod_end(draft: _Draft, pod: DriverPod) -> AttemptEnd | None:
    """How the attempt of ``pod`` ended, or None while it is still going."""
    if pod.phase == "Succeeded":
        return AttemptEnd(
            reason=reason_for_exit(0),
            exit_code=0,
            at=pod.finished_at or draft.now,
            message="the driver exited 0",
        )
    if pod.phase == "Failed":
        exit_code = pod.exit_code
        if pod.reason in POD_FAILURE_REASONS or exit_code is None:
            reason = pod.reason or reason_for_exit(exit_code)
        else:
            reason = reason_for_exit(exit_code)
        detail = describe_exit(exit_code)
        if pod.message:
            detail += f": {pod.message}"
        return AttemptEnd(
            reason=reason,
            exit_code=exit_code,
            at=pod.finished_at or draft.now,
            message=f"driver pod {pod.name} failed, {detail}",
        )
    if pod.phase == "Unknown":
        return AttemptEnd(
            reason="NodeLost",
            exit_code=None,
            at=draft.now,
            message=f"the node of driver pod {pod.name} stopped reporting (phase Unknown)",
        )
    if pod.is_terminating:
        return AttemptEnd(
            reason="DriverPodDeleted",
            exit_code=None,
            at=draft.now,
            message=f"driver pod {pod.name} is being deleted",
        )
    return None


def _standby_report(draft: _Draft) -> tuple[DriverPod, DriverLost] | None:
    """The ready standby, if it reports the current attempt's driver gone."""
    store = draft.observed.store
    report = store.driver_lost if store.is_own else None
    standby = _ready_standby(draft)
    if (report is None or standby is None or report.pod != standby.name
            or report.attempt != draft.status.attempt):
        return None
    # A report is about a moment. It stays on the ConfigMap after the plan let it pass
    # (the policy would not restart then), and must not act later, over a driver that
    # has run on all along: past the grace the kubelet would have reported a real end.
    if draft.seconds_since(_report_time(report)) > draft.settings.kill_grace_seconds:
        return None
    return standby, report


def _report_time(report: DriverLost) -> datetime:
    return datetime.fromtimestamp(report.at, tz=UTC)


def _reported_lost(draft: _Draft, pod: DriverPod) -> AttemptEnd | None:
    """The end of an attempt whose driver the ready standby reports gone.

    A driver's connection to its standby closes the moment its process dies, about a
    second before the kubelet reports the container's end. The report may be false (a
    network fault), so it is acted on only to let the standby take over, which fences
    the old driver first: where the policy would not restart (``Never``, or
    ``maxRestarts`` spent), the kubelet's report, with its exit code, decides.
    """
    found = _standby_report(draft)
    if found is None:
        return None
    standby, report = found
    end = AttemptEnd(
        reason=DRIVER_LOST_REASON,
        exit_code=None,
        at=min(_report_time(report), draft.now),
        message=f"driver pod {pod.name} is lost, as standby driver {standby.name} "
                f"reports: {report.detail}",
    )
    return end if isinstance(_restart_decision(draft, pod, end), Restart) else None


def _lost_to_standby(draft: _Draft) -> frozenset[str]:
    """Driver pods the ready standby reports lost. They neither hold back its promotion,
    which fences them first, nor are they deleted: a crashed driver's pod ends by
    itself, with its logs and exit code (see ``_clean_up_other_attempts``)."""
    found = _standby_report(draft)
    if found is None:
        return frozenset()
    _, report = found
    return frozenset(pod.name for pod in draft.observed.pods
                     if not pod.standby and pod.attempt == report.attempt)


def _left_to_end(draft: _Draft, pod: DriverPod) -> bool:
    """Whether ``pod`` is the driver a standby reported lost, still within the grace its
    container has to be seen ending; past it, it still runs (a false report): stopped."""
    failure = draft.status.last_failure
    if (failure is None or failure.reason != DRIVER_LOST_REASON
            or failure.attempt != pod.attempt):
        return False
    deadline = to_utc(failure.at) + timedelta(seconds=draft.settings.kill_grace_seconds)
    if draft.now >= deadline:
        return False
    draft.requeue_at(deadline)
    return True


def _complete_lost_driver_failure(draft: _Draft) -> None:
    """Add the kubelet's word to the ``lastFailure`` of a driver a standby reported lost.

    The standby's report comes first and knows only that the connection closed; what
    ended the process (``OOMKilled``, exit code 137) is on the pod once the kubelet
    sees it, and belongs where a user looks for why the job restarted.
    """
    failure = draft.status.last_failure
    if (failure is None or failure.reason != DRIVER_LOST_REASON
            or failure.exit_code is not None or failure.attempt is None):
        return
    for pod in draft.observed.pods:
        if (pod.standby or pod.attempt != failure.attempt or pod.phase != "Failed"
                or pod.exit_code is None):
            continue
        detail = describe_exit(pod.exit_code)
        if pod.reason:
            detail = f"{pod.reason}, {detail}"
        draft.set(last_failure=dataclasses.replace(
            failure, exit_code=pod.exit_code,
            message=f"{failure.message}; its pod then failed: {detail}"))
        return


def _spec_changed(draft: _Draft, pod: DriverPod) -> bool:
    running = pod.spec_hash or draft.status.spec_hash
    return running is not None and running != spec_hash(draft.job)


def _upgrade(draft: _Draft, pod: DriverPod) -> bool:
    """Last-state upgrade: stop the attempt, start the new spec from the latest checkpoint."""
    _delete(draft, pod, "SpecChanged")
    message = (
        f"spec changed (generation {draft.observed.generation}): stopping attempt "
        f"{draft.status.attempt} to restart from the latest checkpoint"
    )
    draft.event("Normal", "Upgrading", message)
    draft.set(
        phase=Phase.RESTARTING,
        reason="Upgrading",
        message=message,
        next_restart_at=truncate_to_seconds(draft.now),
    )
    return True


def _watch_start(draft: _Draft, pod: DriverPod) -> bool:
    timeout = draft.job.spec.restart_policy.start_timeout
    deadline = to_utc(pod.created_at) + timedelta(seconds=timeout.seconds)
    waiting = f" ({pod.reason}: {pod.message})" if pod.reason and pod.message else ""
    if pod.reason and not pod.message:
        waiting = f" ({pod.reason})"
    if draft.now >= deadline:
        end = AttemptEnd(
            reason="StartTimeout",
            exit_code=None,
            at=draft.now,
            message=f"driver pod {pod.name} did not start within {timeout.text}{waiting}",
        )
        return _attempt_ended(draft, pod, end)
    draft.set(
        phase=Phase.PENDING,
        reason=pod.reason or draft.status.reason or "Starting",
        message=f"waiting for driver pod {pod.name} to start{waiting}",
    )
    draft.requeue_at(deadline)
    return False


def _watch_running(draft: _Draft, pod: DriverPod) -> bool:
    status = draft.status
    running_since = truncate_to_seconds(pod.started_at or draft.now)
    if status.phase is not Phase.RUNNING:
        draft.event("Normal", "Running", f"driver pod {pod.name} is running")
    draft.set(
        phase=Phase.RUNNING,
        reason="Running",
        message=f"attempt {status.attempt} is running in pod {pod.name}",
        running_since=running_since,
    )
    if status.restarts > 0:
        reset_after = draft.job.spec.restart_policy.reset_after
        healthy_at = running_since + timedelta(seconds=reset_after.seconds)
        if draft.now >= healthy_at:
            draft.set(restarts=0)
            draft.event(
                "Normal",
                "RestartCountReset",
                f"healthy for {reset_after.text}: restart count reset from {status.restarts}",
            )
        else:
            draft.requeue_at(healthy_at)
    nonce = draft.observed.pending_trigger_nonce
    if nonce is not None:
        draft.act(RequestCheckpoint(pod=pod.name, nonce=nonce))
        draft.set(last_trigger_nonce=nonce)
        draft.event("Normal", "CheckpointRequested", f"manual checkpoint requested ({nonce})")
    return False


def _restart_decision(draft: _Draft, pod: DriverPod | None, end: AttemptEnd) -> RestartDecision:
    healthy_since = (pod.started_at if pod is not None else None) or draft.status.running_since
    return decide_restart(
        policy=draft.job.spec.restart_policy,
        end=end,
        restarts=draft.status.restarts,
        healthy_since=healthy_since,
        now=draft.now,
    )


def _attempt_ended(draft: _Draft, pod: DriverPod | None, end: AttemptEnd) -> bool:
    """Apply the restart policy to the end of the current attempt."""
    if pod is not None and end.reason != DRIVER_LOST_REASON:
        _delete(draft, pod, end.reason)
    status = draft.status
    decision = _restart_decision(draft, pod, end)
    failure = None
    if not end.succeeded:
        failure = FailureRecord(
            reason=end.reason,
            message=end.message,
            at=truncate_to_seconds(end.at),
            exit_code=end.exit_code,
            attempt=status.attempt,
        )
    last_failure = failure or status.last_failure
    if isinstance(decision, Finish) and decision.succeeded:
        draft.set(
            phase=Phase.SUCCEEDED,
            reason="Succeeded",
            message=f"attempt {status.attempt} finished",
            next_restart_at=None,
        )
        draft.event("Normal", "Succeeded", f"the job finished (attempt {status.attempt})")
        return False
    if isinstance(decision, Finish | GiveUp):
        draft.set(
            phase=Phase.FAILED,
            reason=decision.reason,
            message=decision.message,
            last_failure=last_failure,
            next_restart_at=None,
        )
        draft.event("Warning", decision.reason, f"the job failed: {decision.message}")
        # A spec changed since this attempt started is retried at once (see _on_failed).
        return True
    assert isinstance(decision, Restart)
    when = truncate_to_seconds(decision.not_before)
    message = f"{decision.message} (at {format_time(when)})"
    standby = _ready_standby(draft)
    if standby is not None:
        # The backoff spaces out driver starts, so that a driver failing as it starts
        # does not start JVMs back to back. A ready standby has started already, and
        # the next one needs a whole start before it is ready: its takeover is not
        # delayed. It still counts as a restart, against maxRestarts.
        when = truncate_to_seconds(draft.now)
        policy = draft.job.spec.restart_policy
        message = (f"{end.message or describe_exit(end.exit_code)}; restart {decision.restarts} of at most "
                   f"{policy.max_restarts}, by the ready standby driver {standby.name}")
    draft.set(
        phase=Phase.RESTARTING,
        reason="BackingOff",
        message=message,
        restarts=decision.restarts,
        next_restart_at=when,
        last_failure=last_failure,
    )
    kind: EventType = "Normal" if end.succeeded else "Warning"
    draft.event(kind, "AttemptEnded" if end.succeeded else end.reason,
                decision.message if standby is None else message)
    return True


def _on_restarting(draft: _Draft) -> bool:
    if draft.job.spec.suspend:
        return _suspend_now(draft, "suspended while restarting")
    next_at = draft.status.next_restart_at
    if next_at is not None and draft.now < to_utc(next_at):
        current = _current_pod(draft)
        if current is not None:
            _delete(draft, current, "Restarting")
        draft.requeue_at(next_at)
        return False
    upgrading = draft.status.reason == "Upgrading"
    _start_attempt(draft, reason="Upgraded" if upgrading else "Restarted", reset_restarts=False)
    return False


def _on_suspended(draft: _Draft) -> bool:
    if draft.job.spec.suspend:
        _wait_for_blocking_pods(draft, "Suspended")
        return False
    _start_attempt(draft, reason="Resumed", reset_restarts=True)
    return False


def _on_failed(draft: _Draft) -> bool:
    if draft.job.spec.suspend:
        return _suspend_now(draft, "suspended after failing; resume to retry")
    status = draft.status
    image_arrived = status.reason == NO_IMAGE_REASON and draft.observed.image is not None
    # spec.restore is not part of the spec hash (it only shapes a fresh start), so a
    # path named after a StoreLost failure is what resumes the job.
    restore_named = (
        status.reason == STORE_LOST_REASON and draft.job.spec.restore.source.kind == "path"
    )
    store_conflict = status.reason == STORE_CONFLICT_REASON
    store_freed = store_conflict and (
        not draft.observed.store.exists
        or draft.observed.store.ownership is StoreOwnership.THIS_JOB
    )
    if status.spec_hash != spec_hash(draft.job) or image_arrived or restore_named or store_freed:
        _start_attempt(draft, reason="Retrying", reset_restarts=True)
    elif store_conflict:
        draft.requeue_in(STORE_CONFLICT_RECHECK_SECONDS)
    return False


def _suspend_now(draft: _Draft, message: str) -> bool:
    _wait_for_blocking_pods(draft, "Suspended")
    draft.set(
        phase=Phase.SUSPENDED,
        reason="Suspended",
        message=message,
        next_restart_at=None,
        suspend_requested_at=None,
    )
    draft.event("Normal", "Suspended", message)
    return False


def _suspend_active(draft: _Draft, pod: DriverPod | None) -> bool:
    """Suspend a Pending or Running attempt, with a final checkpoint when it runs."""
    if pod is not None:
        end = _pod_end(draft, pod)
        if end is not None and end.succeeded:
            return _attempt_ended(draft, pod, end)
        if end is not None:
            draft.set(
                last_failure=FailureRecord(
                    reason=end.reason,
                    message=end.message,
                    at=truncate_to_seconds(end.at),
                    exit_code=end.exit_code,
                    attempt=draft.status.attempt,
                )
            )
            return _suspend_now(draft, f"suspended; the last attempt ended: {end.message}")
    if pod is None or pod.phase != "Running" or pod.started_at is None:
        return _suspend_now(draft, "suspended before the driver started")
    status = draft.status
    requested = status.suspend_requested_at
    if requested is None:
        draft.act(RequestCheckpoint(pod=pod.name, nonce=f"suspend-{status.attempt}"))
        draft.event(
            "Normal",
            "Suspending",
            f"taking a final checkpoint before stopping attempt {status.attempt}",
        )
        draft.set(
            phase=Phase.RUNNING,
            reason="Suspending",
            message="taking a final checkpoint before suspending",
            suspend_requested_at=truncate_to_seconds(draft.now),
        )
        draft.requeue_in(draft.settings.poll_seconds)
        return False
    latest = draft.status.latest_checkpoint
    final = (
        latest is not None
        and latest.completed_at is not None
        and to_utc(latest.completed_at) >= to_utc(requested)
    )
    timeout = draft.job.spec.checkpoint.timeout
    deadline = to_utc(requested) + timedelta(seconds=timeout.seconds)
    if final and latest is not None:
        return _suspend_now(draft, f"suspended after final checkpoint {latest.id}")
    if draft.now >= deadline:
        fallback = f"checkpoint {latest.id}" if latest is not None else "the initial state"
        return _suspend_now(
            draft,
            f"suspended without a final checkpoint (none completed within {timeout.text}); "
            f"resuming restores {fallback}",
        )
    draft.requeue_at(min(deadline, draft.now + timedelta(seconds=draft.settings.poll_seconds)))
    return False


# --- deletion ------------------------------------------------------------------------


DELETING_CHECKPOINTS_REASON = "DeletingCheckpoints"
CHECKPOINTS_RETAINED_REASON = "CheckpointsRetained"


def _plan_deletion(draft: _Draft) -> None:
    """Finalizer path: stop every driver, then delete checkpoint data if asked to.

    The data is deleted by a cleanup pod in the job's namespace, which has what the
    operator deliberately lacks: the job's volumes and, through the kubelet, its S3
    credentials. The finalizer goes once the pod succeeded, or with a
    ``CheckpointsRetained`` Warning once it failed or overran its deadline: a deletion
    is never held forever.
    """
    if _wait_for_blocking_pods(draft, "JobDeleted", standby_too=True):
        draft.set(reason="Terminating", message="waiting for the driver pods to stop")
        return
    job = draft.job
    uid = job.metadata.uid
    if job.spec.cleanup_policy.checkpoints is not CheckpointCleanup.DELETE or not uid:
        draft.act(RemoveFinalizer())
        return
    uri = job_checkpoint_dir(job.spec.checkpoint.storage, job_name=draft.name, job_uid=uid)
    pod = draft.observed.cleanup_pod
    if pod is None:
        _start_cleanup(draft, uri)
        return
    if pod.phase == "Succeeded":
        draft.act(DeleteCheckpointStore(name=checkpoint_configmap_name(draft.name)))
        done = f": {pod.message}" if pod.message else ""
        draft.event("Normal", "CheckpointsDeleted",
                    f"cleanup pod {pod.name} deleted the checkpoint data under {uri}{done}")
        draft.act(RemoveFinalizer())
        return
    problem = _cleanup_problem(draft, pod)
    if problem is None:
        draft.set(reason=DELETING_CHECKPOINTS_REASON,
                  message=f"waiting for cleanup pod {pod.name} to delete {uri}")
        draft.requeue_in(draft.settings.poll_seconds)
        return
    if pod.is_live and not pod.is_terminating:
        draft.act(DeleteCleanupPod(name=pod.name))
    _retain(draft, uri, problem)


def _start_cleanup(draft: _Draft, uri: str) -> None:
    image = draft.observed.image
    if image is None:
        _retain(draft, uri, f"there is no image to run the cleanup pod ({NO_IMAGE_MESSAGE})")
        return
    name = cleanup_pod_name(draft.name)
    draft.act(CreateCleanupPod(name=name, uri=uri, image=image,
                               deadline_seconds=draft.settings.cleanup_deadline_seconds))
    message = f"cleanup pod {name} deletes the checkpoint data under {uri}"
    if draft.status.reason != DELETING_CHECKPOINTS_REASON:
        draft.event("Normal", DELETING_CHECKPOINTS_REASON, message)
    draft.set(reason=DELETING_CHECKPOINTS_REASON, message=message)
    draft.requeue_in(draft.settings.poll_seconds)


def _cleanup_problem(draft: _Draft, pod: CleanupPod) -> str | None:
    """Why the cleanup pod will not succeed, or ``None`` while it still may."""
    detail = f": {pod.message}" if pod.message else ""
    if pod.phase == "Failed":
        return f"cleanup pod {pod.name} failed, {describe_exit(pod.exit_code)}{detail}"
    if pod.phase == "Unknown":
        return f"the node of cleanup pod {pod.name} stopped reporting (phase Unknown)"
    if pod.is_terminating:
        return f"cleanup pod {pod.name} was deleted before it finished"
    settings = draft.settings
    deadline = to_utc(pod.created_at) + timedelta(
        seconds=settings.cleanup_deadline_seconds + settings.kill_grace_seconds
    )
    if draft.now >= deadline:
        waiting = f" ({pod.reason}{detail})" if pod.reason else ""
        return (f"cleanup pod {pod.name} did not finish within "
                f"{settings.cleanup_deadline_seconds}s{waiting}")
    draft.requeue_at(deadline)
    return None


def _retain(draft: _Draft, uri: str, why: str) -> None:
    """Keep the data, say where it is and why, and let the job go."""
    draft.event(
        "Warning",
        CHECKPOINTS_RETAINED_REASON,
        f"checkpoint data under {uri} kept: {why}; delete it with the job's credentials",
    )
    draft.act(RemoveFinalizer())


# --- conditions ----------------------------------------------------------------------


def _set_conditions(draft: _Draft) -> None:
    status = draft.status
    phase = status.phase
    generation = draft.observed.generation
    conditions = status.conditions
    reason = status.reason or (phase.value if phase else "Unknown")
    message = status.message or ""

    def put(kind: ConditionType, value: ConditionStatus, why: str, text: str) -> None:
        nonlocal conditions
        conditions = set_condition(
            conditions,
            kind=kind,
            status=value,
            reason=why,
            message=text,
            now=draft.now,
            observed_generation=generation,
        )

    running = phase is Phase.RUNNING
    put(
        ConditionType.READY,
        ConditionStatus.TRUE if running else ConditionStatus.FALSE,
        "Running" if running else (phase.value if phase else "Unknown"),
        message,
    )
    progressing = phase in (Phase.PENDING, Phase.RESTARTING) or reason == "Suspending"
    put(
        ConditionType.PROGRESSING,
        ConditionStatus.TRUE if progressing else ConditionStatus.FALSE,
        reason if progressing else (phase.value if phase else "Unknown"),
        message,
    )
    value, why, text = _checkpointing(draft)
    put(ConditionType.CHECKPOINTING, value, why, text)
    failed = phase is Phase.FAILED
    put(
        ConditionType.FAILED,
        ConditionStatus.TRUE if failed else ConditionStatus.FALSE,
        reason if failed else "NotFailed",
        message if failed else "",
    )
    draft.set(conditions=conditions)


def _checkpointing(draft: _Draft) -> tuple[ConditionStatus, str, str]:
    status = draft.status
    if status.phase is not Phase.RUNNING:
        return ConditionStatus.UNKNOWN, "NotRunning", "the job is not running"
    checkpoint = draft.job.spec.checkpoint
    allowance = timedelta(seconds=2 * checkpoint.interval.seconds + checkpoint.timeout.seconds)
    since = to_utc(status.running_since or draft.now)
    latest = status.latest_checkpoint
    if (
        latest is not None
        and latest.completed_at is not None
        and to_utc(latest.completed_at) >= since
    ):
        completed = to_utc(latest.completed_at)
        deadline = completed + allowance
        if draft.now <= deadline:
            draft.requeue_at(deadline)
            return (
                ConditionStatus.TRUE,
                "CheckpointCompleted",
                f"checkpoint {latest.id} completed at {format_time(completed)}",
            )
        return (
            ConditionStatus.FALSE,
            "CheckpointOverdue",
            f"no checkpoint completed since checkpoint {latest.id} at {format_time(completed)}; "
            f"expected one every {checkpoint.interval.text}",
        )
    deadline = since + allowance
    if draft.now <= deadline:
        draft.requeue_at(deadline)
        return (
            ConditionStatus.UNKNOWN,
            "AwaitingFirstCheckpoint",
            f"no checkpoint completed yet by attempt {status.attempt}",
        )
    return (
        ConditionStatus.FALSE,
        "CheckpointOverdue",
        f"attempt {status.attempt} has completed no checkpoint since it started at "
        f"{format_time(since)}",
    )
