"""``spec.autoscaler``: recommend a parallelism, and in mode ``Apply`` run the job at it.

Each pass over a running job decides from the samples the operator collected of the
running attempt (:mod:`cjob_lifecycle.scaling_decision`) and records the decision in
``status.autoscaler``; a recommendation other than the current parallelism is an
Event once, when it first appears. ``Apply`` acts on a recommendation that held for
``stabilization``, and at most once per ``stabilization``: it sets
``status.autoscaler.parallelism``, and from the next pass on the job runs at it
(:func:`autoscaled_job`), so the change goes through ``spec.upgradeMode`` like any
other (a ``Snapshot`` upgrade reads nothing twice). ``spec.parallelism`` stays the
user's: a change of it (``kubectl scale``) wins over the autoscaler's choice, which
starts again from there; HPA or KEDA on the scale subresource is the alternative to
this, not a companion.
"""

from __future__ import annotations

import dataclasses

from cjob_lifecycle.observed import Observed
from cjob_lifecycle.plan.draft import Draft
from cjob_lifecycle.scaling_decision import decide
from cjob_spec.model import AutoscalerMode, CheckpointedJob
from cjob_spec.reasons import Reason
from cjob_spec.scaling import rescaled, slot_limit
from cjob_spec.status import AutoscalerStatus, Phase
from cjob_spec.times import truncate_to_seconds

APPLY_RECHECK_SECONDS = 1.0
"""A parallelism just applied is run from the next pass on: it comes soon."""
SAMPLE_SECONDS = 15.0
"""A running job with an autoscaler is passed over this often, to read its metrics."""


def applied_parallelism(observed: Observed) -> int | None:
    """The parallelism ``Apply`` set, while it still stands: the mode is ``Apply`` and
    ``spec.parallelism`` is what it was when it was set."""
    spec = observed.job.spec
    scaled = observed.status.autoscaler
    if spec.autoscaler.mode is not AutoscalerMode.APPLY or scaled is None \
            or scaled.parallelism is None or scaled.spec_parallelism != spec.parallelism:
        return None
    return scaled.parallelism


def autoscaled_job(job: CheckpointedJob, observed: Observed) -> CheckpointedJob:
    """``job`` at the parallelism ``Apply`` set, if one stands."""
    parallelism = applied_parallelism(observed)
    if parallelism is None or parallelism == job.spec.parallelism:
        return job
    return rescaled(job, parallelism)


def autoscale(draft: Draft) -> None:
    """Decide for a running job; record, announce and (``Apply``) set the choice."""
    observed = draft.observed
    spec = observed.job.spec.autoscaler
    previous = draft.status.autoscaler
    if not spec.enabled:
        if previous is not None:
            draft.set(autoscaler=None)
        return
    if draft.status.phase is not Phase.RUNNING:
        return
    draft.requeue_in(SAMPLE_SECONDS)
    job = draft.job
    current = job.spec.parallelism
    decision = decide(observed.scaling_samples, spec=spec, current=current,
                      attempt=draft.status.attempt, max_parallelism=job.spec.max_parallelism,
                      slot_limit=slot_limit(job.spec.spark),
                      known_capacity=previous.capacity_per_subtask if previous else None)
    now = truncate_to_seconds(draft.now)
    same = previous is not None and previous.recommended == decision.recommended
    since = (previous.recommended_since if same and previous is not None else None) or now
    standing = applied_parallelism(observed)
    updated = AutoscalerStatus(
        reason=decision.reason, message=decision.message, recommended=decision.recommended,
        recommended_since=since,
        parallelism=standing,
        spec_parallelism=observed.job.spec.parallelism if standing is not None else None,
        last_scaled_at=previous.last_scaled_at if previous else None,
        input_rate=decision.input_rate, lag_records=decision.lag_records,
        capacity_per_subtask=decision.capacity_per_subtask)
    if decision.recommended != current and not same:
        draft.event("Normal", Reason.SCALING_RECOMMENDED,
                    f"parallelism {decision.recommended} recommended (runs at {current}): "
                    f"{decision.message}")
    if spec.mode is AutoscalerMode.APPLY and decision.recommended != current:
        waited = draft.seconds_since(since)
        held = waited >= spec.stabilization.seconds
        rested = updated.last_scaled_at is None or \
            draft.seconds_since(updated.last_scaled_at) >= spec.stabilization.seconds
        if held and rested:
            updated = dataclasses.replace(
                updated, parallelism=decision.recommended,
                spec_parallelism=observed.job.spec.parallelism, last_scaled_at=now)
            draft.event("Normal", Reason.SCALING_APPLIED,
                        f"parallelism {current} -> {decision.recommended} "
                        f"({decision.reason.value}): {decision.message}")
            draft.requeue_in(APPLY_RECHECK_SECONDS)
        elif not held:
            draft.requeue_in(spec.stabilization.seconds - waited)
    draft.set(autoscaler=updated)
