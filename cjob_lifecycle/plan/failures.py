"""How an attempt ended, what the restart policy says about it, and failing before a start.

An attempt's end is read from its driver pod in one place, so the reason a user sees
is the same whichever part of the pass noticed the end: the pod's own reason where it
says more than the exit code (``OOMKilled``), otherwise the exit code's.
"""

from __future__ import annotations

from cjob_lifecycle.observed import DriverPod
from cjob_lifecycle.plan.draft import Draft
from cjob_lifecycle.plan.pods import delete
from cjob_spec.exit_codes import describe_exit, reason_for_exit
from cjob_spec.model import spec_hash
from cjob_spec.reasons import PodReason, Reason
from cjob_spec.restart import AttemptEnd, RestartDecision, decide_restart
from cjob_spec.status import FailureRecord, Phase
from cjob_spec.times import format_time, truncate_to_seconds

POD_FAILURE_REASONS = frozenset({
    Reason.OOM_KILLED, Reason.EVICTED, Reason.DEADLINE_EXCEEDED, Reason.CONTAINER_CANNOT_RUN,
})
"""Pod or container reasons more telling than the exit code's."""
NO_IMAGE_MESSAGE = (
    "spec.image is not set and the operator has no default runtime image: set spec.image, "
    "or install the operator with one (chart value runtimeImage.repository, "
    "flag --runtime-image)"
)


def pod_end(draft: Draft, pod: DriverPod) -> AttemptEnd | None:
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
        reason: Reason | PodReason = reason_for_exit(exit_code)
        if pod.reason in POD_FAILURE_REASONS:
            reason = Reason(pod.reason)
        elif pod.reason and exit_code is None:
            reason = PodReason(pod.reason)  # says more than "DriverLost"
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
            reason=Reason.NODE_LOST,
            exit_code=None,
            at=draft.now,
            message=f"the node of driver pod {pod.name} stopped reporting (phase Unknown)",
        )
    if pod.node_lost_since is not None and not pod.is_finished:
        return AttemptEnd(
            reason=Reason.NODE_LOST,
            exit_code=None,
            at=draft.now,
            message=f"the node of driver pod {pod.name} stopped reporting at "
                    f"{format_time(pod.node_lost_since)}; a new attempt takes over, and "
                    f"the store's fence stops the old driver should its node come back",
        )
    if pod.is_terminating:
        return AttemptEnd(
            reason=Reason.DRIVER_POD_DELETED,
            exit_code=None,
            at=draft.now,
            message=f"driver pod {pod.name} is being deleted",
        )
    return None


def restart_decision(draft: Draft, pod: DriverPod | None, end: AttemptEnd) -> RestartDecision:
    """The restart policy's verdict on ``end``; the attempt was healthy since its driver
    started running."""
    healthy_since = (pod.started_at if pod is not None else None) or draft.status.running_since
    return decide_restart(
        policy=draft.job.spec.restart_policy,
        end=end,
        restarts=draft.status.restarts,
        healthy_since=healthy_since,
        now=draft.now,
    )


def fail_without_image(draft: Draft) -> None:
    """No image to run the driver in: a permanent failure until the spec names one or
    the operator gets a default (a failed job then starts again)."""
    fail_before_start(draft, reason=Reason.NO_IMAGE, message=NO_IMAGE_MESSAGE)


def fail_before_start(draft: Draft, *, reason: Reason, message: str) -> None:
    """A permanent failure found before an attempt could start: no restart budget is
    spent, and a failed job starts again once what was missing arrives.

    A driver still running here is one a standby reported lost (every other was
    stopped before the attempt could start): it must not run on in a failed job.
    """
    for pod in draft.observed.pods:
        if not pod.standby and pod.is_live:
            delete(draft, pod, reason)
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
