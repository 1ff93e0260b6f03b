"""plan() with ``spec.autoscaler``: the decision recorded in ``status.autoscaler`` and
announced once; ``Apply`` runs the job at it after ``stabilization``, through the
upgrade path, until ``spec.parallelism`` itself changes."""

from __future__ import annotations

import dataclasses
from typing import Any

from operator_world import at, driver, make_job, observe, reasons, run, status

from cjob_lifecycle.actions import DeleteDriver
from cjob_lifecycle.observed import MetricSample, Observed
from cjob_lifecycle.plan import Plan
from cjob_spec import Phase, Reason
from cjob_spec.model import CheckpointedJob
from cjob_spec.status import JobStatus, ScalingReason

AUTOSCALER = {"min": 1, "max": 16, "targetLag": "60s", "targetUtilization": 0.5,
              "stabilization": "2m"}


def job(mode: str, **fields: Any) -> CheckpointedJob:
    return make_job(autoscaler={**AUTOSCALER, "mode": mode}, **fields)


def behind(end: float, *, attempt: int = 1) -> tuple[MetricSample, ...]:
    """A minute of readings up to ``end``: 1000/s read by 2 subtasks, lag 6000 -> 12000."""
    return (MetricSample(at=at(end - 60), attempt=attempt, records_in=0.0, lag_records=6000.0),
            MetricSample(at=at(end), attempt=attempt, records_in=60_000.0,
                         lag_records=12_000.0))


def running(of: CheckpointedJob, *, attempt: int = 1, **changes: Any) -> JobStatus:
    return status(Phase.RUNNING, attempt, job=of, running_since=at(0), **changes)


def pass_at(of: CheckpointedJob, job_status: JobStatus, seconds: float, *,
            attempt: int = 1) -> Plan:
    observed: Observed = dataclasses.replace(
        observe(of, job_status, driver(attempt, job=of)), scaling_samples=behind(seconds))
    return run(observed, at(seconds))


class TestRecommend:
    def test_the_decision_is_recorded_and_announced_once(self) -> None:
        recommend = job("Recommend")
        first = pass_at(recommend, running(recommend), 100)
        scaled = first.status.autoscaler
        assert scaled is not None
        assert (scaled.reason, scaled.recommended, scaled.recommended_since) == (
            ScalingReason.SCALE_UP, 8, at(100))
        assert scaled.capacity_per_subtask == 500 and scaled.lag_records == 12_000
        assert reasons(first) == [Reason.SCALING_RECOMMENDED]
        again = pass_at(recommend, first.status, 400)
        assert Reason.SCALING_RECOMMENDED not in reasons(again)
        assert again.status.autoscaler is not None
        assert again.status.autoscaler.recommended_since == at(100)
        # Recommend changes nothing that runs.
        assert not again.of_type(DeleteDriver)
        assert again.status.autoscaler.parallelism is None

    def test_switched_off_the_status_forgets_it(self) -> None:
        recommend = job("Recommend")
        first = pass_at(recommend, running(recommend), 100)
        off = job("Off")
        assert pass_at(off, first.status, 130).status.autoscaler is None

    def test_a_job_that_does_not_run_is_not_judged(self) -> None:
        recommend = job("Recommend")
        suspended = status(Phase.SUSPENDED, 1, job=recommend)
        assert pass_at(recommend, suspended, 100).status.autoscaler is None


class TestApply:
    def test_a_recommendation_is_applied_once_it_held_then_the_job_upgrades_to_it(
            self) -> None:
        apply = job("Apply")
        first = pass_at(apply, running(apply), 100)
        assert first.status.autoscaler is not None
        assert first.status.autoscaler.parallelism is None       # not held for 2m yet
        assert first.requeue_after is not None and first.requeue_after <= 120

        held = pass_at(apply, first.status, 221)
        scaled = held.status.autoscaler
        assert scaled is not None
        assert (scaled.parallelism, scaled.spec_parallelism, scaled.last_scaled_at) == (
            8, 2, at(221))
        assert Reason.SCALING_APPLIED in reasons(held)

        # From the next pass on the job runs at 8: its attempt at 2 is upgraded.
        upgrading = pass_at(apply, held.status, 222)
        assert upgrading.job is not None and upgrading.job.spec.parallelism == 8
        assert upgrading.job.spec.spark.executor.instances >= 8  # a slot per subtask
        assert [d.reason for d in upgrading.of_type(DeleteDriver)] == [Reason.SPEC_CHANGED]
        assert upgrading.status.reason == Reason.UPGRADING

    def test_kubectl_scale_wins_over_the_applied_parallelism(self) -> None:
        apply = job("Apply")
        held = pass_at(apply, pass_at(apply, running(apply), 100).status, 221)
        rescaled = job("Apply", parallelism=4, **{"spark.executor.instances": 4})
        after = pass_at(rescaled, held.status, 230)
        assert after.job is not None and after.job.spec.parallelism == 4
        assert after.status.autoscaler is not None
        assert after.status.autoscaler.parallelism is None

    def test_two_scalings_are_at_least_the_stabilization_apart(self) -> None:
        apply = job("Apply")
        held = pass_at(apply, pass_at(apply, running(apply), 100).status, 221)
        scaled = held.status.autoscaler
        assert scaled is not None
        # Suppose the job now runs at 8 and is still behind: it wants 32 (capped at 16).
        at8 = dataclasses.replace(held.status, attempt=2,
                                  autoscaler=dataclasses.replace(
                                      scaled, recommended=16, recommended_since=at(100)))
        soon = pass_at(apply, at8, 280, attempt=2)
        assert soon.status.autoscaler is not None
        assert soon.status.autoscaler.last_scaled_at == at(221)
        assert Reason.SCALING_APPLIED not in reasons(soon)

