"""A redeploy (``spec.restore.redeployNonce``): start the job again from a chosen point.

A job restores its latest checkpoint; ``spec.restore`` only picks where a job with no
checkpoint starts. To go back (to a snapshot taken before a bad release, an older
retained checkpoint, a copy elsewhere), the user names the point in ``spec.restore``
and sets ``redeployNonce`` to a new value, as Flink's operator does with
``savepointRedeployNonce``. The running attempt, if any, is stopped at once (its state
since the point is what the user is leaving), and the next attempt restores the point,
told to even though the store holds newer checkpoints. Until an attempt of its own
completes a checkpoint, every restart restores the point again: the discarded
checkpoints stay in the store (they are pruned as new ones complete), so the planner
remembers what it discarded (``status.discardedThrough``, ``discardedAttempt``,
``discardedReplacement: RestoreSource``), as a Stateless upgrade does with nothing in
their place. The sinks withdraw output newer than the restored checkpoint where they
can (the files sink does; Kafka cannot, and the driver says so).

The request is acted on once (``status.lastRedeployNonce``) in every phase: a running
or starting attempt is stopped, a job backing off or suspended starts from the point
when it starts next, a job that ended (Failed or Succeeded) starts again, and a job
that never started records it (its first start restores ``spec.restore`` anyway).
"""

from __future__ import annotations

from cjob_lifecycle.plan.attempts import start_attempt
from cjob_lifecycle.plan.draft import Draft
from cjob_lifecycle.plan.pods import current_pod, delete
from cjob_spec.reasons import Reason
from cjob_spec.status import DiscardedReplacement, Phase
from cjob_spec.times import truncate_to_seconds


def redeploy(draft: Draft) -> None:
    """Act on a ``redeployNonce`` not acted on yet (see the module docstring)."""
    nonce = draft.observed.pending_redeploy_nonce
    if nonce is None:
        return
    status = draft.status
    draft.set(last_redeploy_nonce=nonce)
    if status.phase is None or status.attempt == 0:
        return  # its first start restores spec.restore
    point = _point(draft)
    latest = status.latest_checkpoint
    draft.set(discarded_through=latest.id if latest is not None else 0,
              discarded_attempt=status.attempt,
              discarded_replacement=DiscardedReplacement.RESTORE_SOURCE)
    newer = f"; checkpoint {latest.id} and older are not restored again" if latest else ""
    if status.phase in (Phase.PENDING, Phase.RUNNING) and not draft.job.spec.suspend:
        pod = current_pod(draft)
        if pod is not None:
            delete(draft, pod, Reason.REDEPLOYING)
        message = (f"redeploy requested ({nonce}): stopping attempt {status.attempt} to "
                   f"start again from {point}{newer}")
        draft.event("Normal", Reason.REDEPLOYING, message)
        draft.set(phase=Phase.RESTARTING, reason=Reason.REDEPLOYING, message=message,
                  next_restart_at=truncate_to_seconds(draft.now), suspend_requested_at=None)
    elif status.phase in (Phase.FAILED, Phase.SUCCEEDED):
        draft.event("Normal", Reason.REDEPLOYING,
                    f"redeploy requested ({nonce}): the {status.phase.value.lower()} job "
                    f"starts again from {point}{newer}")
        start_attempt(draft, reason=Reason.REDEPLOYED, reset_restarts=True)
    else:
        suspended = status.phase is Phase.SUSPENDED or draft.job.spec.suspend
        when = "resumes" if suspended else "restarts"
        draft.event("Normal", Reason.REDEPLOYING,
                    f"redeploy requested ({nonce}): the job {when} from {point}{newer}")


def _point(draft: Draft) -> str:
    """``spec.restore``'s starting point in words."""
    source = draft.job.spec.restore.source
    if source.kind == "snapshot":
        return f"snapshot {source.snapshot}"
    if source.kind == "id":
        return f"checkpoint {source.checkpoint_id}"
    return str(source.path)
