"""Rollback (``spec.rollback``): a changed spec that fails, or completes no checkpoint
within ``readinessTimeout``, gives way to the last spec that ran well.

A spec *ran well* once an attempt running it completed a checkpoint after it started;
the job's spec as stored is then kept in ``status.lastStableSpec``. A changed spec is
*pending* (``status.upgrade``) from its first attempt until one of its attempts
completes a checkpoint. A pending spec whose attempt fails (the restart policy would
restart it, or gave up), or that completes nothing within the timeout, is rolled
back: its hash is kept in ``status.rolledBackSpecHash``, the attempt is stopped, and
the next one runs the stable spec from the latest checkpoint, which is the newest
from before the change (the changed spec never completed one), so the output stays
exactly once.

**Decision: the user's spec is never rewritten.** The operator cannot tell which of
two edits a user meant to keep; it runs the stable spec *instead of* the job's as
long as the job's spec hashes to the rolled-back one. Fields no driver depends on
(``suspend``, ``restartPolicy``, ``restore``, ``upgradeMode``, ``rollback``,
``snapshots``, ``cleanupPolicy``, ``standby``, ``checkpoint.triggerNonce``) are still
taken from the
job, so a rolled-back job can be suspended or given a manual checkpoint; any change
of a field that is part of the hash is a new spec and is tried (:func:`effective_job`,
which the plan hands back as ``Plan.job`` for the operator to build its pods from).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from cjob_lifecycle.observed import Observed
from cjob_lifecycle.plan.draft import Draft
from cjob_lifecycle.plan.pods import current_pod, delete
from cjob_spec.errors import SpecError
from cjob_spec.model import CheckpointedJob, spec_hash
from cjob_spec.names import API_VERSION, KIND
from cjob_spec.parse import parse_job
from cjob_spec.reasons import Reason
from cjob_spec.status import PendingUpgrade, Phase, StableSpec
from cjob_spec.times import to_utc, truncate_to_seconds


def rolled_back(observed: Observed) -> bool:
    """Whether the job runs its last stable spec instead of its own."""
    status = observed.status
    return (observed.job.spec.rollback.enabled and status.stable_spec is not None
            and status.rolled_back_spec_hash is not None
            and spec_hash(observed.job) == status.rolled_back_spec_hash)


def effective_job(observed: Observed) -> CheckpointedJob:
    """The job as its pods must run it: its own spec, or, while that spec is the one
    rolled back, the stable spec with the job's fields that no driver depends on."""
    job = observed.job
    stable = observed.status.stable_spec
    if stable is None or not rolled_back(observed):
        return job
    try:
        parsed = parse_job({"apiVersion": API_VERSION, "kind": KIND,
                            "metadata": {"name": job.name, "namespace": job.namespace},
                            "spec": dict(stable.spec)})
    except SpecError:
        return job  # a stable spec this release no longer reads: run the job's own
    own = job.spec
    spec = dataclasses.replace(
        parsed.spec, suspend=own.suspend, restart_policy=own.restart_policy,
        restore=own.restore, upgrade_mode=own.upgrade_mode, rollback=own.rollback,
        cleanup_policy=own.cleanup_policy, standby=own.standby, snapshots=own.snapshots,
        checkpoint=dataclasses.replace(parsed.spec.checkpoint,
                                       trigger_nonce=own.checkpoint.trigger_nonce))
    return dataclasses.replace(job, spec=spec)


def track_rollback(draft: Draft) -> None:
    """Keep the stable spec, follow a pending one, and roll it back when it fails."""
    observed = draft.observed
    status = draft.status
    if not observed.job.spec.rollback.enabled:
        if status.stable_spec or status.upgrade or status.rolled_back_spec_hash:
            draft.set(stable_spec=None, upgrade=None, rolled_back_spec_hash=None)
        return
    if status.rolled_back_spec_hash is not None and not rolled_back(observed):
        draft.set(rolled_back_spec_hash=None)  # the spec changed since: it is tried
    elif status.rolled_back_spec_hash is not None and status.phase is Phase.RUNNING:
        # Running, but not the job's own spec: the reason says so (and the condition).
        draft.set(reason=Reason.ROLLED_BACK)
    running = status.spec_hash
    if running is None or status.phase is None:
        return
    stable = status.stable_spec
    on_trial = stable is not None and running != stable.spec_hash
    if on_trial and (status.upgrade is None or status.upgrade.spec_hash != running):
        # Recorded before anything can prove the spec: a checkpoint the old spec
        # completed within the second the new attempt started proves nothing.
        latest = status.latest_checkpoint
        draft.set(upgrade=PendingUpgrade(
            spec_hash=running, started_at=truncate_to_seconds(status.started_at or draft.now),
            checkpoint_id=latest.id if latest is not None else None))
    if _proven(draft):
        raw = observed.raw_spec
        if ((stable is None or stable.spec_hash != running) and raw is not None
                and spec_hash(observed.job) == running):
            draft.set(stable_spec=StableSpec(spec_hash=running, spec=dict(raw)))
        if draft.status.upgrade is not None:
            draft.set(upgrade=None)
        return
    pending = draft.status.upgrade
    if not on_trial or pending is None:
        return
    why = _failure(draft)
    timeout = draft.job.spec.rollback.readiness_timeout
    deadline = to_utc(pending.started_at) + timedelta(seconds=timeout.seconds)
    if why is None and draft.now >= deadline and status.phase is not Phase.SUSPENDED:
        why = f"it completed no checkpoint within {timeout.text}"
    if why is None:
        if status.phase is not Phase.SUSPENDED:
            draft.requeue_at(deadline)
        return
    _roll_back(draft, why)


def _proven(draft: Draft) -> bool:
    """The current attempt completed a checkpoint after it started."""
    status = draft.status
    latest = status.latest_checkpoint
    started = status.started_at
    return (latest is not None and latest.completed_at is not None and started is not None
            and to_utc(latest.completed_at) >= to_utc(started)
            and (status.upgrade is None or status.upgrade.checkpoint_id is None
                 or latest.id > status.upgrade.checkpoint_id))


def _failure(draft: Draft) -> str | None:
    """Why the pending spec's current attempt counts as failed, if it does."""
    status = draft.status
    failure = status.last_failure
    ended_badly = (failure is not None and failure.attempt == status.attempt
                   and (status.phase is Phase.FAILED
                        or (status.phase is Phase.RESTARTING
                            and status.reason != Reason.UPGRADING)))
    if not ended_badly or failure is None:
        return None
    return f"attempt {status.attempt} failed ({failure.reason}: {failure.message})"


def _roll_back(draft: Draft, why: str) -> None:
    pod = current_pod(draft)
    if pod is not None and pod.is_live:
        delete(draft, pod, Reason.ROLLED_BACK)
    stable = draft.status.stable_spec
    assert stable is not None
    message = (f"spec (generation {draft.observed.generation}) rolled back: {why}; running "
               f"the last spec that ran well (hash {stable.spec_hash}) from the latest "
               f"checkpoint until the spec changes again")
    draft.event("Warning", Reason.ROLLED_BACK, message)
    draft.set(phase=Phase.RESTARTING, reason=Reason.ROLLED_BACK, message=message,
              next_restart_at=truncate_to_seconds(draft.now), upgrade=None,
              rolled_back_spec_hash=spec_hash(draft.observed.job), suspend_requested_at=None,
              discarded_through=None,  # the stable spec's own state is what it restores
              discarded_attempt=None, discarded_replacement=None)
