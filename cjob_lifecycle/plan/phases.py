"""The state machine over ``status.phase``: one handler per phase, run until the job settles.

A handler returns True when it moved the job to a phase whose handler should run in
the same pass (a failed attempt whose backoff is already over starts the next one at
once); the pass never loops more than a few times, whatever the handlers say.
"""

from __future__ import annotations

from datetime import timedelta

from cjob_lifecycle.actions import RequestCheckpoint
from cjob_lifecycle.observed import DriverPod, StoreOwnership
from cjob_lifecycle.plan.attempts import attempt_ended, start_attempt
from cjob_lifecycle.plan.draft import Draft
from cjob_lifecycle.plan.failures import pod_end
from cjob_lifecycle.plan.pods import current_pod, delete, wait_for_blocking_pods
from cjob_lifecycle.plan.standby import reported_lost
from cjob_lifecycle.plan.store import STORE_CONFLICT_RECHECK_SECONDS, redeploy_in_effect
from cjob_lifecycle.plan.suspension import suspend_active, suspend_now
from cjob_lifecycle.plan.upgrades import upgrade
from cjob_spec.model import spec_hash
from cjob_spec.names import driver_pod_name
from cjob_spec.reasons import Reason
from cjob_spec.restart import AttemptEnd
from cjob_spec.status import Phase
from cjob_spec.times import to_utc, truncate_to_seconds

MAX_HANDLERS_PER_PASS = 4
"""A job settles within two or three handlers; the bound keeps a pass finite whatever
the handlers say."""


def run_state_machine(draft: Draft) -> None:
    """Run the handler of the job's phase, and the next one's while a handler asks."""
    for _ in range(MAX_HANDLERS_PER_PASS):
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


def _on_new(draft: Draft) -> bool:
    if draft.job.spec.suspend:
        draft.set(
            phase=Phase.SUSPENDED,
            reason=Reason.SUSPENDED,
            message="created suspended; set spec.suspend to false to start",
        )
        draft.event("Normal", Reason.SUSPENDED, "created suspended")
        return False
    start_attempt(draft, reason=Reason.STARTED, reset_restarts=True)
    return False


def _on_active(draft: Draft) -> bool:
    """Pending or Running: watch the current attempt's driver pod."""
    pod = current_pod(draft)
    if draft.job.spec.suspend:
        return suspend_active(draft, pod)
    if draft.status.reason == Reason.WAITING_FOR_SNAPSHOT:
        # No driver of this start yet, on purpose: it waits for the snapshot it restores
        # (a pod of the attempt before, stopped for a redeploy, is not this start's).
        start_attempt(draft, reason=_waiting_start_reason(draft), reset_restarts=False)
        return False
    if pod is None:
        started = draft.status.started_at
        grace = draft.settings.pod_appear_grace_seconds
        if started is not None and draft.seconds_since(started) < grace:
            draft.requeue_at(to_utc(started) + timedelta(seconds=grace))
            return False
        name = draft.status.driver_pod or driver_pod_name(draft.name, draft.status.attempt)
        missing = AttemptEnd(
            reason=Reason.DRIVER_POD_MISSING,
            exit_code=None,
            at=draft.now,
            message=f"driver pod {name} disappeared",
        )
        return attempt_ended(draft, None, missing)
    end = pod_end(draft, pod) or reported_lost(draft, pod)
    if end is not None:
        return attempt_ended(draft, pod, end)
    if _spec_changed(draft, pod):
        return upgrade(draft, pod)
    if pod.started_at is None or pod.phase == "Pending":
        return _watch_start(draft, pod)
    return _watch_running(draft, pod)


def _waiting_start_reason(draft: Draft) -> Reason:
    """Why the start that waits for its snapshot starts: a redeploy, the job's first
    start, or a restart."""
    if redeploy_in_effect(draft):
        return Reason.REDEPLOYED
    return Reason.STARTED if draft.status.attempt == 0 else Reason.RESTARTED


def _on_restarting(draft: Draft) -> bool:
    if draft.job.spec.suspend:
        return suspend_now(draft, "suspended while restarting")
    next_at = draft.status.next_restart_at
    if next_at is not None and draft.now < to_utc(next_at):
        current = current_pod(draft)
        if current is not None:
            delete(draft, current, Reason.RESTARTING)
        draft.requeue_at(next_at)
        return False
    if draft.status.reason == Reason.ROLLED_BACK:
        start_attempt(draft, reason=Reason.ROLLED_BACK, reset_restarts=True)
        return False
    reason = Reason.RESTARTED
    if draft.status.reason == Reason.UPGRADING:
        reason = Reason.UPGRADED
    elif draft.status.reason == Reason.REDEPLOYING:
        reason = Reason.REDEPLOYED
    start_attempt(draft, reason=reason, reset_restarts=reason is Reason.REDEPLOYED)
    return False


def _on_suspended(draft: Draft) -> bool:
    if draft.job.spec.suspend:
        wait_for_blocking_pods(draft, Reason.SUSPENDED)
        return False
    start_attempt(draft, reason=Reason.RESUMED, reset_restarts=True)
    return False


def _on_failed(draft: Draft) -> bool:
    if draft.job.spec.suspend:
        return suspend_now(draft, "suspended after failing; resume to retry")
    status = draft.status
    image_arrived = status.reason == Reason.NO_IMAGE and draft.image is not None
    # spec.restore is not part of the spec hash (it only shapes a fresh start), so a
    # path named after a StoreLost failure is what resumes the job.
    restore_named = (
        status.reason == Reason.STORE_LOST and draft.job.spec.restore.source.kind == "path"
    )
    # Likewise allowNonRestoredState, set after a restore was refused for state the
    # pipeline no longer maps: it lets the same checkpoint restore.
    state_dropping_allowed = (
        status.reason == Reason.INCOMPATIBLE_STATE
        and draft.job.spec.restore.allow_non_restored_state
    )
    store_conflict = status.reason == Reason.STORE_CONFLICT
    store_freed = store_conflict and (
        not draft.observed.store.exists
        or draft.observed.store.ownership is StoreOwnership.THIS_JOB
    )
    if (status.spec_hash != spec_hash(draft.job) or image_arrived or restore_named
            or store_freed or state_dropping_allowed):
        start_attempt(draft, reason=Reason.RETRYING, reset_restarts=True)
    elif store_conflict:
        draft.requeue_in(STORE_CONFLICT_RECHECK_SECONDS)
    return False


def _spec_changed(draft: Draft, pod: DriverPod) -> bool:
    running = pod.spec_hash or draft.status.spec_hash
    return running is not None and running != spec_hash(draft.job)


def _watch_start(draft: Draft, pod: DriverPod) -> bool:
    timeout = draft.job.spec.restart_policy.start_timeout
    deadline = to_utc(pod.created_at) + timedelta(seconds=timeout.seconds)
    waiting = f" ({pod.reason}: {pod.message})" if pod.reason and pod.message else ""
    if pod.reason and not pod.message:
        waiting = f" ({pod.reason})"
    if draft.now >= deadline:
        end = AttemptEnd(
            reason=Reason.START_TIMEOUT,
            exit_code=None,
            at=draft.now,
            message=f"driver pod {pod.name} did not start within {timeout.text}{waiting}",
        )
        return attempt_ended(draft, pod, end)
    draft.set(
        phase=Phase.PENDING,
        # The kubelet's reason (ImagePullBackOff) says more than any of ours.
        reason=pod.reason or draft.status.reason or Reason.STARTING,
        message=f"waiting for driver pod {pod.name} to start{waiting}",
    )
    draft.requeue_at(deadline)
    return False


def _unplaced_executor(draft: Draft, pod: DriverPod) -> bool | None:
    """End the attempt when one of its executors has waited for a node longer than
    ``startTimeout`` (what ``attempt_ended`` returns); otherwise come back when the
    first of them would have (``None``: the attempt goes on)."""
    timeout = draft.job.spec.restart_policy.start_timeout
    waiting = [e for e in draft.observed.executors
               if e.attempt == pod.attempt and e.unschedulable_since is not None
               and e.phase == "Pending" and e.deletion_timestamp is None]
    if not waiting:
        return None
    oldest = min(waiting, key=lambda e: to_utc(e.unschedulable_since or draft.now))
    since = to_utc(oldest.unschedulable_since or draft.now)
    deadline = since + timedelta(seconds=timeout.seconds)
    if draft.now < deadline:
        draft.requeue_at(deadline)
        return None
    why = f": {oldest.unschedulable_message}" if oldest.unschedulable_message else ""
    end = AttemptEnd(
        reason=Reason.EXECUTORS_UNSCHEDULABLE, exit_code=None, at=draft.now,
        message=(f"{len(waiting)} executor pod(s) of attempt {pod.attempt} could not be "
                 f"scheduled for {timeout.text} ({oldest.name}{why}); the barrier stage "
                 f"needs every executor at once: lower spec.spark.executor (instances, "
                 f"cores, memory) or add capacity, and the changed spec retries the job"))
    return attempt_ended(draft, pod, end)


def _watch_running(draft: Draft, pod: DriverPod) -> bool:
    ended = _unplaced_executor(draft, pod)
    if ended is not None:
        return ended
    status = draft.status
    running_since = truncate_to_seconds(pod.started_at or draft.now)
    if status.phase is not Phase.RUNNING:
        draft.event("Normal", Reason.RUNNING, f"driver pod {pod.name} is running")
    draft.set(
        phase=Phase.RUNNING,
        reason=Reason.RUNNING,
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
                Reason.RESTART_COUNT_RESET,
                f"healthy for {reset_after.text}: restart count reset from {status.restarts}",
            )
        else:
            draft.requeue_at(healthy_at)
    nonce = draft.observed.pending_trigger_nonce
    if nonce is not None:
        draft.act(RequestCheckpoint(pod=pod.name, nonce=nonce))
        draft.set(last_trigger_nonce=nonce)
        draft.event("Normal", Reason.CHECKPOINT_REQUESTED, f"manual checkpoint requested ({nonce})")
    return False
