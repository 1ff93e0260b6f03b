"""A spec change reaching a running attempt (``spec.upgradeMode``).

``LastState`` stops the driver at once; the next attempt runs the new spec from the
latest checkpoint, and the records read since that checkpoint are read again. The
output stays exactly once, but the work is done twice and the sinks' output since
the checkpoint waits for the new attempt.

``Stateless`` stops the driver at once too, and the new spec starts with empty state:
its sources read from their ``start`` again and its sinks send nothing the old state
still owed; the output already committed stays. Until the new spec completes its
first checkpoint, every attempt starts empty (``status.discardedThrough``).

``Snapshot`` goes through the suspend path first: the running driver is asked for
a final checkpoint (the suspend nonce of its attempt), every sink commits it, and the
driver ends by itself (exit code 8). The attempt's end is then an upgrade, not a
failure: the new spec starts at once from that checkpoint, with nothing read twice
(:func:`~cjob_lifecycle.plan.attempts.attempt_ended`). Without a final checkpoint
within the checkpoint timeout, or without the driver's end within another timeout
after it, the upgrade falls back to ``LastState``. A driver that is not running yet
has nothing to save and is replaced at once.
"""

from __future__ import annotations

from datetime import timedelta

from cjob_lifecycle.actions import RequestCheckpoint
from cjob_lifecycle.observed import DriverPod
from cjob_lifecycle.plan.draft import Draft
from cjob_lifecycle.plan.pods import delete
from cjob_lifecycle.plan.store import discarded
from cjob_spec.model import UpgradeMode
from cjob_spec.names import suspend_nonce
from cjob_spec.reasons import Reason
from cjob_spec.status import DiscardedReplacement, Phase
from cjob_spec.times import to_utc, truncate_to_seconds


def upgrade(draft: Draft, pod: DriverPod) -> bool:
    """Make way for the changed spec, as ``spec.upgradeMode`` says."""
    running = pod.phase == "Running" and pod.started_at is not None
    mode = draft.job.spec.upgrade_mode
    if mode is UpgradeMode.SNAPSHOT and running:
        return _through_final_checkpoint(draft, pod)
    if mode is UpgradeMode.STATELESS:
        return _restart_empty(draft, pod)
    return restart_from_latest(draft, pod)


def _restart_empty(draft: Draft, pod: DriverPod) -> bool:
    """Stop the attempt; the new spec starts with empty state, and so does every attempt
    until it completes a checkpoint of its own."""
    latest = draft.status.latest_checkpoint
    unused = f", checkpoint {latest.id} and older unused" if latest else ""
    return _stop(draft, pod, f"; the new spec starts with empty state (upgradeMode: "
                             f"Stateless{unused})",
                 discarded_through=latest.id if latest is not None else 0,
                 discarded_attempt=draft.status.attempt,
                 discarded_replacement=DiscardedReplacement.EMPTY)


def forget_discarded(draft: Draft) -> None:
    """A later attempt, running the new spec (or redeployed), completed a checkpoint: its
    own state is what restores from now on."""
    if draft.status.discarded_through is not None and draft.status.latest_checkpoint \
            is not None and not discarded(draft):
        draft.set(discarded_through=None, discarded_attempt=None, discarded_replacement=None)


def restart_from_latest(draft: Draft, pod: DriverPod, *, why: str = "") -> bool:
    """Stop the attempt; the new spec starts from the latest checkpoint."""
    return _stop(draft, pod, f" to restart from the latest checkpoint{why}")


def _stop(draft: Draft, pod: DriverPod, what: str, **changes: object) -> bool:
    """Delete the attempt's driver for the changed spec, say so, and restart at once."""
    delete(draft, pod, Reason.SPEC_CHANGED)
    message = (f"spec changed (generation {draft.observed.generation}): stopping attempt "
               f"{draft.status.attempt}{what}")
    draft.event("Normal", Reason.UPGRADING, message)
    draft.set(phase=Phase.RESTARTING, reason=Reason.UPGRADING, message=message,
              next_restart_at=truncate_to_seconds(draft.now), suspend_requested_at=None,
              **changes)
    return True


def _through_final_checkpoint(draft: Draft, pod: DriverPod) -> bool:
    status = draft.status
    requested = status.suspend_requested_at
    if requested is None:
        draft.act(RequestCheckpoint(pod=pod.name, nonce=suspend_nonce(status.attempt)))
        message = (
            f"spec changed (generation {draft.observed.generation}): taking a final "
            f"checkpoint of attempt {status.attempt}, then starting the new spec from it "
            f"(upgradeMode: Snapshot)"
        )
        draft.event("Normal", Reason.UPGRADING, message)
        draft.set(phase=Phase.RUNNING, reason=Reason.UPGRADING, message=message,
                  suspend_requested_at=truncate_to_seconds(draft.now))
        draft.requeue_in(draft.settings.poll_seconds)
        return False
    timeout = draft.job.spec.checkpoint.timeout
    latest = status.latest_checkpoint
    final = (latest is not None and latest.completed_at is not None
             and to_utc(latest.completed_at) >= to_utc(requested))
    if final and latest is not None and latest.completed_at is not None:
        # Its sinks commit it now, then the driver ends (exit code 8).
        deadline = to_utc(latest.completed_at) + timedelta(seconds=timeout.seconds)
        if draft.now >= deadline:
            return restart_from_latest(
                draft, pod, why=f" (the driver did not stop within {timeout.text} of its "
                                f"final checkpoint {latest.id})")
        draft.set(message=f"final checkpoint {latest.id} completed; waiting for the driver "
                          "to commit its output and stop, then starting the new spec")
    else:
        deadline = to_utc(requested) + timedelta(seconds=timeout.seconds)
        if draft.now >= deadline:
            return restart_from_latest(
                draft, pod, why=f" (no final checkpoint completed within {timeout.text})")
    draft.requeue_at(min(deadline, draft.now + timedelta(seconds=draft.settings.poll_seconds)))
    return False
