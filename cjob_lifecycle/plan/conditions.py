"""The four conditions (Ready, Progressing, Checkpointing, Failed), and RolledBack with
``spec.rollback``, set on every pass.

They are derived from the status the pass ends with, never kept up by hand, so they
cannot disagree with the phase. A condition's ``lastTransitionTime`` moves only when
its status flips (:func:`~cjob_spec.status.set_condition`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from cjob_lifecycle.plan.draft import Draft
from cjob_spec.model import spec_hash
from cjob_spec.reasons import Reason
from cjob_spec.status import ConditionStatus, ConditionType, Phase, set_condition
from cjob_spec.times import format_time, to_utc

PHASE_REASONS: Mapping[Phase, Reason] = {
    Phase.PENDING: Reason.PENDING,
    Phase.RUNNING: Reason.RUNNING,
    Phase.RESTARTING: Reason.RESTARTING,
    Phase.SUSPENDED: Reason.SUSPENDED,
    Phase.SUCCEEDED: Reason.SUCCEEDED,
    Phase.FAILED: Reason.FAILED,
}
"""A phase as a condition's reason, where the condition has nothing more telling."""


def phase_reason(phase: Phase | None) -> Reason:
    return PHASE_REASONS[phase] if phase is not None else Reason.UNKNOWN


def set_conditions(draft: Draft) -> None:
    status = draft.status
    phase = status.phase
    generation = draft.observed.generation
    conditions = status.conditions
    # The status's own reason, which may be the kubelet's (ImagePullBackOff).
    reason = status.reason or phase_reason(phase)
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
        Reason.RUNNING if running else phase_reason(phase),
        message,
    )
    progressing = phase in (Phase.PENDING, Phase.RESTARTING) or reason == Reason.SUSPENDING
    put(
        ConditionType.PROGRESSING,
        ConditionStatus.TRUE if progressing else ConditionStatus.FALSE,
        reason if progressing else phase_reason(phase),
        message,
    )
    value, why, text = _checkpointing(draft)
    put(ConditionType.CHECKPOINTING, value, why, text)
    failed = phase is Phase.FAILED
    put(
        ConditionType.FAILED,
        ConditionStatus.TRUE if failed else ConditionStatus.FALSE,
        reason if failed else Reason.NOT_FAILED,
        message if failed else "",
    )
    if draft.observed.job.spec.rollback.enabled:
        back = status.rolled_back_spec_hash
        in_force = back is not None and back == spec_hash(draft.observed.job)
        stable = status.stable_spec
        put(
            ConditionType.ROLLED_BACK,
            ConditionStatus.TRUE if in_force else ConditionStatus.FALSE,
            Reason.ROLLED_BACK if in_force else Reason.NOT_ROLLED_BACK,
            (f"the spec failed; running the last spec that ran well (hash "
             f"{stable.spec_hash if stable else '?'}) until the spec changes again")
            if in_force else "",
        )
    draft.set(conditions=conditions)


def _checkpointing(draft: Draft) -> tuple[ConditionStatus, Reason, str]:
    status = draft.status
    if status.phase is not Phase.RUNNING:
        return ConditionStatus.UNKNOWN, Reason.NOT_RUNNING, "the job is not running"
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
                Reason.CHECKPOINT_COMPLETED,
                f"checkpoint {latest.id} completed at {format_time(completed)}",
            )
        return (
            ConditionStatus.FALSE,
            Reason.CHECKPOINT_OVERDUE,
            f"no checkpoint completed since checkpoint {latest.id} at {format_time(completed)}; "
            f"expected one every {checkpoint.interval.text}",
        )
    deadline = since + allowance
    if draft.now <= deadline:
        draft.requeue_at(deadline)
        return (
            ConditionStatus.UNKNOWN,
            Reason.AWAITING_FIRST_CHECKPOINT,
            f"no checkpoint completed yet by attempt {status.attempt}",
        )
    return (
        ConditionStatus.FALSE,
        Reason.CHECKPOINT_OVERDUE,
        f"attempt {status.attempt} has completed no checkpoint since it started at "
        f"{format_time(since)}",
    )
