"""Suspending a job (``spec.suspend``): a final checkpoint when its driver runs, then no driver.

A running driver is asked for one last checkpoint, so that resuming loses nothing.
The driver takes it as its final checkpoint: once it completed, every sink commits
it and the driver ends by itself (exit code 8), so a suspended job's output is
visible up to that checkpoint. A checkpoint in the store is not enough to stop the
driver: its sinks commit only after it is there. Without that checkpoint within the
checkpoint timeout, or without the driver's end within another timeout after it, the
driver is stopped anyway. A driver that is not running yet has nothing to save and is
stopped at once.
"""

from __future__ import annotations

from datetime import timedelta

from cjob_lifecycle.actions import RequestCheckpoint
from cjob_lifecycle.observed import DriverPod
from cjob_lifecycle.plan.attempts import attempt_ended
from cjob_lifecycle.plan.draft import Draft
from cjob_lifecycle.plan.failures import pod_end
from cjob_lifecycle.plan.pods import delete_finished, wait_for_blocking_pods
from cjob_spec.names import suspend_nonce
from cjob_spec.reasons import Reason
from cjob_spec.status import FailureRecord, Phase
from cjob_spec.times import to_utc, truncate_to_seconds


def suspend_now(draft: Draft, message: str) -> bool:
    """Stop every driver and mark the job suspended; never runs another phase's handler."""
    wait_for_blocking_pods(draft, Reason.SUSPENDED)
    draft.set(
        phase=Phase.SUSPENDED,
        reason=Reason.SUSPENDED,
        message=message,
        next_restart_at=None,
        suspend_requested_at=None,
    )
    draft.event("Normal", Reason.SUSPENDED, message)
    return False


def suspend_active(draft: Draft, pod: DriverPod | None) -> bool:
    """Suspend a Pending or Running attempt, with a final checkpoint when it runs."""
    if pod is not None:
        end = pod_end(draft, pod)
        if end is not None and end.succeeded:
            return attempt_ended(draft, pod, end)
        if end is not None and end.suspended:
            # Its exit code shows as an error in kubectl's pod list, and a suspended
            # job has no driver: the pod goes, as a driver stopped for a suspend does.
            delete_finished(draft, pod, reason=Reason.SUSPENDED)
            latest = draft.status.latest_checkpoint
            which = f" {latest.id}" if latest is not None else ""
            return suspend_now(draft, f"suspended after final checkpoint{which}, "
                                      "its output committed")
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
            return suspend_now(draft, f"suspended; the last attempt ended: {end.message}")
    if pod is None or pod.phase != "Running" or pod.started_at is None:
        return suspend_now(draft, "suspended before the driver started")
    status = draft.status
    requested = status.suspend_requested_at
    if requested is None:
        draft.act(RequestCheckpoint(pod=pod.name, nonce=suspend_nonce(status.attempt)))
        draft.event(
            "Normal",
            Reason.SUSPENDING,
            f"taking a final checkpoint before stopping attempt {status.attempt}",
        )
        draft.set(
            phase=Phase.RUNNING,
            reason=Reason.SUSPENDING,
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
    if final and latest is not None and latest.completed_at is not None:
        # Its sinks commit it now; the driver ends once they did. One that does not
        # (a runtime that predates this, a commit that hangs) is stopped after another
        # timeout: its output then becomes visible when the job resumes.
        committed_by = to_utc(latest.completed_at) + timedelta(seconds=timeout.seconds)
        if draft.now >= committed_by:
            return suspend_now(
                draft,
                f"suspended after final checkpoint {latest.id}; the driver did not stop "
                f"within {timeout.text} of it, so its output is committed when the job "
                "resumes")
        draft.set(message=f"final checkpoint {latest.id} completed; waiting for the driver "
                          "to commit its output and stop")
        draft.requeue_at(min(committed_by,
                             draft.now + timedelta(seconds=draft.settings.poll_seconds)))
        return False
    if draft.now >= deadline:
        fallback = f"checkpoint {latest.id}" if latest is not None else "the initial state"
        return suspend_now(
            draft,
            f"suspended without a final checkpoint (none completed within {timeout.text}); "
            f"resuming restores {fallback}",
        )
    draft.requeue_at(min(deadline, draft.now + timedelta(seconds=draft.settings.poll_seconds)))
    return False
