"""One pass over one job: the parts of the decision, in the order they must run.

The order is part of the lifecycle. The spec the pass decides for comes first (a
rolled-back job runs its last stable spec); drivers of other attempts are stopped
before the current one is judged; a failed change is rolled back after the state
machine judged its attempt; the standby is managed after that, so that one promoted
in this pass is not also stopped or replaced; the conditions come last, from the
status everything else left.
"""

from __future__ import annotations

from datetime import datetime

from cjob_lifecycle.observed import Observed
from cjob_lifecycle.plan.attempts import clean_up_other_attempts
from cjob_lifecycle.plan.autoscale import autoscale, autoscaled_job
from cjob_lifecycle.plan.conditions import set_conditions
from cjob_lifecycle.plan.deletion import plan_deletion
from cjob_lifecycle.plan.draft import Draft, Plan, PlanSettings
from cjob_lifecycle.plan.phases import run_state_machine
from cjob_lifecycle.plan.redeploy import redeploy
from cjob_lifecycle.plan.rollback import effective_job, track_rollback
from cjob_lifecycle.plan.snapshot_schedule import schedule_snapshots
from cjob_lifecycle.plan.standby import complete_lost_driver_failure, manage_standby
from cjob_lifecycle.plan.store import take_restore_report
from cjob_lifecycle.plan.upgrades import forget_discarded


def plan(observed: Observed, *, now: datetime, settings: PlanSettings | None = None) -> Plan:
    """Decide what to do about one CheckpointedJob (see :mod:`cjob_lifecycle.plan`)."""
    draft = Draft(observed, now, settings or PlanSettings())
    draft.job = autoscaled_job(effective_job(observed), observed)
    # A store that is not the job's own says nothing about the job.
    own = observed.store.latest if observed.store.is_own else None
    latest = own or observed.status.latest_checkpoint
    draft.set(observed_generation=observed.generation, latest_checkpoint=latest)
    if observed.deleting:
        plan_deletion(draft)
    else:
        clean_up_other_attempts(draft)
        complete_lost_driver_failure(draft)
        redeploy(draft)
        run_state_machine(draft)
        track_rollback(draft)
        autoscale(draft)
        schedule_snapshots(draft)
        manage_standby(draft)
        take_restore_report(draft)
        forget_discarded(draft)
        set_conditions(draft)
        if draft.status.phase is not None and not draft.status.phase.is_terminal:
            draft.requeue_in(draft.settings.resync_seconds)
    return draft.build()
