"""Attempts: starting the next one, applying the restart policy to the end of one, and
stopping drivers of other attempts.

Each attempt n runs in pod ``<job>-attempt-<n>``, or in the standby driver promoted
to it. Before its driver is created or promoted, the store's fence is advanced to n,
so older attempts (a zombie on a lost node) can no longer write. An attempt restores
from ``latest`` when the store holds a checkpoint, otherwise from
``spec.restore.from``, or from the Completed snapshot ``spec.restore.snapshot`` names
(the attempt waits, Pending, until there is one). While a redeploy is in effect
(``status.discardedReplacement``), it restores that starting point instead of the
latest, and tells the driver to, newer checkpoints or not.
"""

from __future__ import annotations

from cjob_lifecycle.actions import (
    AdvanceFence,
    CreateDriver,
    EnsureCheckpointConfigMap,
    EnsureNetworkPolicy,
    EnsureRole,
    EnsureRoleBinding,
    EnsureService,
    EnsureServiceAccount,
    EnsureSparkAuthSecret,
    EventType,
    PromoteStandby,
)
from cjob_lifecycle.observed import DriverPod, StoreOwnership
from cjob_lifecycle.plan.draft import Draft
from cjob_lifecycle.plan.failures import fail_without_image, restart_decision
from cjob_lifecycle.plan.pods import delete, delete_finished, wait_for_blocking_pods
from cjob_lifecycle.plan.snapshot_schedule import snapshot_before_upgrade
from cjob_lifecycle.plan.standby import (
    left_to_end,
    lost_to_standby,
    promotion_in_flight,
    ready_standby,
)
from cjob_lifecycle.plan.store import (
    discarded,
    fail_store_lost,
    lost_checkpoint,
    redeploy_in_effect,
    refuse_foreign_store,
)
from cjob_spec.exit_codes import describe_exit
from cjob_spec.model import ephemeral_storage_problem, spec_hash
from cjob_spec.names import (
    checkpoint_configmap_name,
    driver_pod_name,
    driver_service_name,
    job_selector,
    network_policy_name,
    role_binding_name,
    role_name,
    service_account_name,
    spark_auth_secret_name,
)
from cjob_spec.reasons import Reason
from cjob_spec.restart import AttemptEnd, Finish, GiveUp, Restart
from cjob_spec.snapshot import SnapshotState
from cjob_spec.status import FailureRecord, Phase
from cjob_spec.times import format_time, truncate_to_seconds


def clean_up_other_attempts(draft: Draft) -> None:
    """Stop drivers of other attempts and prune old finished pods."""
    current = draft.status.attempt
    in_flight = promotion_in_flight(draft)
    for pod in draft.observed.pods:
        if pod.attempt == current or pod.standby:
            continue
        if in_flight is not None and pod.name == in_flight[0].name:
            continue  # the next attempt's, promoted by a pass that did not finish
        if pod.is_live and left_to_end(draft, pod):
            continue
        if pod.is_live or pod.phase == "Unknown":
            delete(draft, pod, Reason.STALE_ATTEMPT)
        elif pod.attempt <= current - draft.settings.keep_finished_attempts:
            delete_finished(draft, pod)


def start_attempt(draft: Draft, *, reason: Reason, reset_restarts: bool) -> None:
    """Create the next attempt's driver once no earlier driver can overlap it.

    A ready standby takes over without waiting for the earlier drivers to stop: the
    fence moves to the new attempt before its promotion, so none of them can complete
    a checkpoint or commit output after it, and a standby's Spark runs apart from
    theirs (its executors reach it at its own address). Waiting would cost the
    takeover the seconds a pod takes to stop, or, for a pod whose node is gone, the
    whole kill grace.
    """
    # A redeploy restores another point than the latest, which a standby cannot be told.
    redeploying = redeploy_in_effect(draft)
    standby = None if redeploying else ready_standby(draft)  # only non-standby pods stop
    in_flight = promotion_in_flight(draft)
    spared = lost_to_standby(draft) | (
        frozenset() if in_flight is None else frozenset({in_flight[0].name}))
    if wait_for_blocking_pods(draft, Reason.SUPERSEDED, unless=spared,
                              wait=standby is None):
        if draft.status.phase is None:
            draft.set(reason=Reason.WAITING_FOR_PREVIOUS_DRIVER)
        draft.set(message="waiting for the previous driver pod to stop")
        return
    observed = draft.observed
    job = draft.job
    image = draft.image
    if image is None:
        fail_without_image(draft)
        return
    attempt = 1 + max(
        [draft.status.attempt, observed.store.fence_attempt or 0]
        + [pod.attempt for pod in observed.pods]
    )
    if in_flight is not None:
        attempt = in_flight[1].attempt  # finish it: the same attempt, the same pod
    if observed.store.exists and observed.store.ownership is not StoreOwnership.THIS_JOB:
        refuse_foreign_store(draft)
        return
    latest = draft.status.latest_checkpoint
    source = job.spec.restore.source
    lost = lost_checkpoint(draft)
    if lost is not None and source.kind != "path":
        fail_store_lost(draft, lost)
        return
    # ``origin`` is what the driver is asked for; what it restored (it may fall back)
    # becomes ``restoredFrom`` only when it reports (``store.take_restore_report``).
    if in_flight is not None:
        pointer = in_flight[1].restore  # what the promoted pod was told already
        origin = "checkpoint " + pointer if pointer.isdigit() else pointer
    elif latest is not None and lost is None and discarded(draft) and not redeploying:
        pointer = "none"  # the state a Stateless upgrade discarded (see ``upgrades``)
        origin = "an empty state (upgradeMode: Stateless)"
    elif latest is not None and lost is None and not redeploying:
        pointer = "latest"
        origin = f"checkpoint {latest.id}"
    elif source.kind == "snapshot":
        resolved = _snapshot_pointer(draft)
        if resolved is None:
            return
        pointer, origin = resolved
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
                               image=image, restore_exact=redeploying))
        message = f"started attempt {attempt} (pod {pod_name}) from {origin}"
    draft.event("Normal", reason, message)
    problem = ephemeral_storage_problem(job.spec)
    if problem is not None:
        draft.event("Warning", Reason.CHECKPOINTS_NOT_PERSISTENT, problem)
    draft.set(
        phase=Phase.PENDING,
        reason=reason,
        message=message,
        attempt=attempt,
        restarts=0 if reset_restarts else draft.status.restarts,
        driver_pod=pod_name,
        spec_hash=spec_hash(job),
        parallelism=job.spec.parallelism,
        selector=job_selector(job.metadata.name),
        started_at=truncate_to_seconds(draft.now),
        running_since=None,
        last_restart_at=truncate_to_seconds(draft.now) if attempt > 1 else None,
        next_restart_at=None,
        restored_from=None,
        suspend_requested_at=None,
        storage_roots=_with_storage_root(draft),
    )
    draft.requeue_in(draft.settings.pod_appear_grace_seconds)


SNAPSHOT_WAIT_SECONDS = 5.0


def _snapshot_pointer(draft: Draft) -> tuple[str, str] | None:
    """The ``_metadata`` of the Completed snapshot ``spec.restore.snapshot`` names, and
    the words for it; ``None`` (the job waits, Pending) until it is Completed."""
    name = draft.job.spec.restore.source.snapshot
    view = draft.observed.restore_snapshot
    if view is not None and view.state is SnapshotState.COMPLETED and view.path:
        return view.path, (f"snapshot {name} (checkpoint {view.checkpoint_id} of job "
                           f"{view.job_name})")
    if view is None or view.state is None:
        message = f"waiting for CheckpointedJobSnapshot {name}, which does not exist"
    elif view.state is SnapshotState.FAILED:
        message = (f"CheckpointedJobSnapshot {name} failed ({view.message}); apply another "
                   f"snapshot, or change spec.restore")
    else:
        message = f"waiting for CheckpointedJobSnapshot {name} to complete ({view.message})"
    draft.set(phase=Phase.PENDING, reason=Reason.WAITING_FOR_SNAPSHOT, message=message)
    draft.requeue_in(SNAPSHOT_WAIT_SECONDS)
    return None


def _with_storage_root(draft: Draft) -> tuple[str, ...]:
    """The status's storage roots with the one this attempt writes to: a deletion with
    ``cleanupPolicy.checkpoints: Delete`` deletes every root the job ever used."""
    roots = draft.status.storage_roots
    root = draft.storage_root
    return roots if root is None or root in roots else (*roots, root)


def attempt_ended(draft: Draft, pod: DriverPod | None, end: AttemptEnd) -> bool:
    """Apply the restart policy to the end of the current attempt.

    True when the job moved to a phase whose handler should run in the same pass.
    """
    if pod is not None and end.reason != Reason.DRIVER_LOST:
        delete(draft, pod, end.reason)
    status = draft.status
    if end.suspended and status.reason == Reason.UPGRADING and not draft.job.spec.suspend:
        # The final checkpoint a Snapshot upgrade asked for is committed: the new spec
        # starts from it at once, and it is no restart (see ``upgrades``).
        latest = status.latest_checkpoint
        which = f" {latest.id}" if latest is not None else ""
        if latest is not None:
            snapshot_before_upgrade(draft, checkpoint_id=latest.id)
        message = (f"attempt {status.attempt} stopped after its final checkpoint{which}, its "
                   f"output committed; starting the new spec from it")
        draft.set(phase=Phase.RESTARTING, reason=Reason.UPGRADING, message=message,
                  next_restart_at=truncate_to_seconds(draft.now))
        return True
    decision = restart_decision(draft, pod, end)
    failure = None
    if not end.succeeded and not end.suspended:
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
            reason=Reason.SUCCEEDED,
            message=f"attempt {status.attempt} finished",
            next_restart_at=None,
        )
        draft.event("Normal", Reason.SUCCEEDED, f"the job finished (attempt {status.attempt})")
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
        # A spec changed since this attempt started is retried at once (see the Failed
        # phase's handler).
        return True
    assert isinstance(decision, Restart)
    when = truncate_to_seconds(decision.not_before)
    message = f"{decision.message} (at {format_time(when)})"
    standby = ready_standby(draft)
    if standby is not None:
        # The backoff spaces out driver starts, so that a driver failing as it starts
        # does not start JVMs back to back. A ready standby has started already, and
        # the next one needs a whole start before it is ready: its takeover is not
        # delayed. It still counts as a restart, against maxRestarts.
        when = truncate_to_seconds(draft.now)
        policy = draft.job.spec.restart_policy
        message = (f"{end.message or describe_exit(end.exit_code)}; restart "
                   f"{decision.restarts} of at most {policy.max_restarts}, by the ready "
                   f"standby driver {standby.name}")
    draft.set(
        phase=Phase.RESTARTING,
        reason=Reason.BACKING_OFF,
        message=message,
        restarts=decision.restarts,
        next_restart_at=when,
        last_failure=last_failure,
    )
    clean = end.succeeded or end.suspended
    kind: EventType = "Normal" if clean else "Warning"
    draft.event(kind, Reason.ATTEMPT_ENDED if clean else end.reason,
                decision.message if standby is None else message)
    return True
