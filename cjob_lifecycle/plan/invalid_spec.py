"""The plan for a job whose spec does not parse: say so, and touch nothing else.

The API server validates against the CRD's schema, so a spec that reaches the operator
and still does not parse comes from an older CRD or a bug. Guessing at it could stop
a healthy driver; reporting it cannot.
"""

from __future__ import annotations

from datetime import datetime

from cjob_lifecycle.actions import Action, EmitEvent
from cjob_lifecycle.plan.draft import Plan
from cjob_spec.errors import SpecError
from cjob_spec.reasons import Reason
from cjob_spec.status import ConditionStatus, ConditionType, JobStatus, Phase, set_condition


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
        actions.append(EmitEvent(type="Warning", reason=Reason.INVALID_SPEC, message=message))
    new = status.replace(observed_generation=generation, message=message)
    if status.phase is None or status.phase is Phase.FAILED:
        new = new.replace(phase=Phase.FAILED, reason=Reason.INVALID_SPEC, spec_hash=None)
    conditions = new.conditions
    conditions = set_condition(
        conditions,
        kind=ConditionType.READY,
        status=ConditionStatus.TRUE if new.phase is Phase.RUNNING else ConditionStatus.FALSE,
        reason=Reason.INVALID_SPEC,
        message=message,
        now=now,
        observed_generation=generation,
    )
    if new.phase is Phase.FAILED:
        conditions = set_condition(
            conditions,
            kind=ConditionType.FAILED,
            status=ConditionStatus.TRUE,
            reason=Reason.INVALID_SPEC,
            message=message,
            now=now,
            observed_generation=generation,
        )
    return Plan(actions=tuple(actions), status=new.replace(conditions=conditions))
