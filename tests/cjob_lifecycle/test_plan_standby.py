"""plan() with a warm standby driver (spec.standby): promote it instead of creating a driver."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest
from operator_world import IMAGE, T0, at, driver, kinds, make_job, observe, status

from cjob_lifecycle.actions import (
    AdvanceFence,
    CreateDriver,
    CreateStandby,
    DeleteDriver,
    EmitEvent,
    PromoteStandby,
)
from cjob_lifecycle.observed import DriverPod, Observed
from cjob_lifecycle.plan import Plan, PlanSettings, plan
from cjob_spec import CheckpointedJob, Phase, Reason, spec_hash
from cjob_spec.driver_beacon import DriverLost
from cjob_spec.exit_codes import ExitCode

WITH_STANDBY = PlanSettings()


def standby_job(**fields: object) -> CheckpointedJob:
    return make_job(**{"standby.enabled": True, **fields})


def standby(created_in: int, *, job: CheckpointedJob, ready: bool = True,
            phase: str = "Running", deleting: datetime | None = None,
            exit_code: int | None = None, finished_at: datetime | None = None,
            message: str | None = None) -> DriverPod:
    return DriverPod(name=f"clicks-standby-{created_in}", attempt=created_in, phase=phase,
                     created_at=T0, started_at=at(1), standby=True, ready=ready,
                     spec_hash=spec_hash(job), deletion_timestamp=deleting,
                     exit_code=exit_code, finished_at=finished_at, message=message)


def run(observed: Observed, now: datetime) -> Plan:
    return plan(observed, now=now, settings=WITH_STANDBY)


def failed_attempt_one(job: CheckpointedJob, *extra: DriverPod) -> Observed:
    return observe(job, status(Phase.RUNNING, 1, job=job),
                   driver(1, "Failed", job=job, exit_code=137, hash_of=job), *extra)


class TestPromotion:
    """The next attempt's driver is the ready standby, promoted once the fence moved."""

    def test_a_failed_attempt_promotes_the_ready_standby_instead_of_creating_a_driver(self) -> None:
        job = standby_job()
        result = run(failed_attempt_one(job, standby(1, job=job)), at(120))
        assert result.of_type(CreateDriver) == []
        assert result.of_type(PromoteStandby) == [
            PromoteStandby(name="clicks-standby-1", attempt=2, restore_pointer="latest")]
        assert result.status.attempt == 2
        assert result.status.driver_pod == "clicks-standby-1"
        assert result.status.phase is Phase.PENDING

    def test_the_fence_moves_to_the_new_attempt_before_the_standby_is_promoted(self) -> None:
        job = standby_job()
        names = kinds(run(failed_attempt_one(job, standby(1, job=job)), at(120)))
        assert names.index("AdvanceFence") < names.index("PromoteStandby")
        assert AdvanceFence(attempt=2) in run(
            failed_attempt_one(job, standby(1, job=job)), at(120)).actions

    def test_a_new_standby_is_started_for_the_next_failure_once_one_is_promoted(self) -> None:
        job = standby_job()
        result = run(failed_attempt_one(job, standby(1, job=job)), at(120))
        assert result.of_type(CreateStandby) == [
            CreateStandby(name="clicks-standby-2", attempt=2, image=IMAGE)]
        assert kinds(result).index("PromoteStandby") < kinds(result).index("CreateStandby")

    def test_a_standby_still_starting_its_spark_is_not_promoted(self) -> None:
        job = standby_job()
        result = run(failed_attempt_one(job, standby(1, job=job, ready=False)), at(120))
        assert [a.attempt for a in result.of_type(CreateDriver)] == [2]
        assert result.of_type(PromoteStandby) == []

    def test_a_standby_of_an_older_spec_is_not_promoted_and_is_replaced(self) -> None:
        old = standby_job(parallelism=1)
        job = standby_job(parallelism=2, **{"spark.executor.instances": 2})
        result = run(failed_attempt_one(job, standby(1, job=old)), at(120))
        assert result.of_type(PromoteStandby) == []
        assert [a.attempt for a in result.of_type(CreateDriver)] == [2]
        assert DeleteDriver(name="clicks-standby-1",
                            reason=Reason.STANDBY_OUTDATED) in result.actions

    def test_a_standby_on_a_node_that_stopped_reporting_is_never_promoted_and_is_replaced(
            self) -> None:
        job = standby_job()
        silent = dataclasses.replace(standby(1, job=job), node_lost_since=at(100))
        result = run(failed_attempt_one(job, silent), at(120))
        assert result.of_type(PromoteStandby) == []
        assert [a.attempt for a in result.of_type(CreateDriver)] == [2]
        assert DeleteDriver(name="clicks-standby-1", reason=Reason.NODE_LOST,
                            force=True) in result.actions

    def test_a_promoted_standby_is_watched_as_the_attempts_driver(self) -> None:
        job = standby_job()
        promoted = dataclasses.replace(standby(1, job=job), attempt=2, standby=False)
        job_status = status(Phase.PENDING, 2, job=job).replace(driver_pod="clicks-standby-1")
        result = run(observe(job, job_status, promoted,
                             standby(2, job=job)), at(130))
        assert result.status.phase is Phase.RUNNING
        assert "DeleteDriver" not in kinds(result)
        assert "CreateStandby" not in kinds(result)


class TestKeepingOneStandby:
    """An active job that asks for a standby has exactly one, of its current spec."""

    def test_a_running_job_that_asks_for_a_standby_gets_one(self) -> None:
        job = standby_job()
        result = run(observe(job, status(Phase.RUNNING, 1, job=job), driver(1, job=job,
                                                                              hash_of=job)), at(60))
        assert result.of_type(CreateStandby) == [
            CreateStandby(name="clicks-standby-1", attempt=1, image=IMAGE)]

    def test_a_running_standby_is_kept_and_not_mistaken_for_a_stale_attempt(self) -> None:
        job = standby_job()
        result = run(observe(job, status(Phase.RUNNING, 1, job=job),
                             driver(1, job=job, hash_of=job), standby(1, job=job)), at(60))
        assert "CreateStandby" not in kinds(result)
        assert "DeleteDriver" not in kinds(result)

    def test_turning_the_standby_off_stops_it(self) -> None:
        job = make_job()
        result = run(observe(job, status(Phase.RUNNING, 1, job=job),
                             driver(1, job=job, hash_of=job), standby(1, job=job)), at(60))
        assert result.of_type(DeleteDriver) == [
            DeleteDriver(name="clicks-standby-1", reason=Reason.STANDBY_NOT_NEEDED)]

    def test_a_finished_job_stops_its_standby(self) -> None:
        job = standby_job()
        result = run(observe(job, status(Phase.RUNNING, 1, job=job),
                             driver(1, "Succeeded", job=job, hash_of=job),
                             standby(1, job=job)), at(60))
        assert result.status.phase is Phase.SUCCEEDED
        assert DeleteDriver(name="clicks-standby-1",
                            reason=Reason.STANDBY_NOT_NEEDED) in result.actions

    def test_a_standby_that_exited_is_cleared_away_before_it_is_replaced(self) -> None:
        job = standby_job()
        dead = standby(1, job=job, phase="Failed", exit_code=1)
        result = run(observe(job, status(Phase.RUNNING, 1, job=job),
                             driver(1, job=job, hash_of=job), dead), at(60))
        assert DeleteDriver(name="clicks-standby-1", reason=Reason.PRUNED_HISTORY) in result.actions
        assert result.of_type(CreateStandby) == []

    def test_a_standby_that_just_failed_is_replaced_only_after_the_retry_delay(self) -> None:
        # One that cannot start (a refused watch, say) must not start a JVM every few seconds.
        job = standby_job()
        dead = standby(1, job=job, phase="Failed", exit_code=2, finished_at=at(50),
                       message="cannot watch configmap:team/clicks-checkpoints: 403 Forbidden")
        observed = observe(job, status(Phase.RUNNING, 1, job=job),
                           driver(1, job=job, hash_of=job), dead)
        early = run(observed, at(60))
        assert "DeleteDriver" not in kinds(early) and "CreateStandby" not in kinds(early)
        assert early.requeue_after is not None and early.requeue_after <= 50.0
        late = run(observed, at(50 + WITH_STANDBY.standby_retry_seconds + 1))
        assert DeleteDriver(name="clicks-standby-1", reason=Reason.PRUNED_HISTORY) in late.actions
        (warning,) = [a for a in late.of_type(EmitEvent) if a.reason == Reason.STANDBY_FAILED]
        assert warning.type == "Warning"
        assert "clicks-standby-1" in warning.message and "403 Forbidden" in warning.message

    def test_a_standby_does_not_hold_back_a_restart(self) -> None:
        job = standby_job()
        result = run(failed_attempt_one(job, standby(1, job=job, ready=False)), at(120))
        assert result.status.attempt == 2
        assert "clicks-standby-1" not in [a.name for a in result.of_type(DeleteDriver)]

    def test_deleting_the_job_stops_and_waits_for_its_standby(self) -> None:
        job = standby_job()
        observed = dataclasses.replace(
            observe(job, status(Phase.RUNNING, 1, job=job), standby(1, job=job)), deleting=True)
        result = run(observed, at(60))
        assert DeleteDriver(name="clicks-standby-1", reason=Reason.JOB_DELETED) in result.actions
        assert "RemoveFinalizer" not in kinds(result)


class TestHowSoonAStandbyTakesOver:
    """A ready standby takes over without the restart backoff, and it still counts."""

    def test_a_ready_standby_takes_over_at_once_not_after_the_restart_backoff(self) -> None:
        # The backoff (10 s by default) spaces out driver starts; a standby has started already.
        job = standby_job()
        result = run(failed_attempt_one(job, standby(1, job=job)), at(65.4))  # failed at 65
        assert result.of_type(PromoteStandby) == [
            PromoteStandby(name="clicks-standby-1", attempt=2, restore_pointer="latest")]
        assert result.status.restarts == 1
        assert result.status.phase is Phase.PENDING

    def test_the_takeover_counts_against_max_restarts(self) -> None:
        job = standby_job(**{"restartPolicy.maxRestarts": 1})
        failed = failed_attempt_one(job, standby(1, job=job))
        result = run(dataclasses.replace(failed, status=failed.status.replace(restarts=1)),
                     at(65.4))
        assert result.of_type(PromoteStandby) == []
        assert result.status.phase is Phase.FAILED
        assert result.status.reason == Reason.RESTART_LIMIT_EXCEEDED

    def test_without_a_ready_standby_a_failure_still_waits_for_the_backoff(self) -> None:
        job = standby_job()
        result = run(failed_attempt_one(job, standby(1, job=job, ready=False)), at(65.4))
        assert result.of_type(PromoteStandby) == [] and result.of_type(CreateDriver) == []
        assert result.status.phase is Phase.RESTARTING
        assert result.status.next_restart_at == at(75)


def lost(attempt: int, *, by: str = "clicks-standby-1") -> DriverLost:
    return DriverLost(attempt=attempt, pod=by, at=T0.timestamp() + 65,
                      detail=f"the driver of attempt {attempt} is gone: its connection "
                             f"closed without a goodbye")


def reported(observed: Observed, report: DriverLost) -> Observed:
    """``observed`` with ``report`` on the job's checkpoint ConfigMap."""
    return dataclasses.replace(observed,
                               store=dataclasses.replace(observed.store, driver_lost=report))


def running_attempt_one(job: CheckpointedJob, *extra: DriverPod) -> Observed:
    # The kubelet has not noticed yet: the driver pod still runs, as far as the API says.
    return observe(job, status(Phase.RUNNING, 1, job=job), driver(1, job=job, hash_of=job),
                   *extra)


class TestAReportThatTheDriverIsLost:
    """A ready standby's report ends the attempt, but only to take it over."""

    def test_a_ready_standby_reporting_the_driver_lost_is_promoted_at_once(self) -> None:
        job = standby_job()
        result = run(reported(running_attempt_one(job, standby(1, job=job)), lost(1)), at(65.2))
        assert result.of_type(PromoteStandby) == [
            PromoteStandby(name="clicks-standby-1", attempt=2, restore_pointer="latest")]
        assert result.status.attempt == 2 and result.status.restarts == 1
        assert result.status.last_failure is not None
        assert result.status.last_failure.reason == Reason.DRIVER_LOST
        assert "clicks-standby-1 reports" in result.status.last_failure.message
        names = kinds(result)
        assert names.index("AdvanceFence") < names.index("PromoteStandby")

    def test_the_reported_driver_is_neither_waited_for_nor_deleted_while_it_ends(self) -> None:
        # Its pod ends by itself, with its logs and exit code, as the kubelet reports it.
        job = standby_job()
        result = run(reported(running_attempt_one(job, standby(1, job=job)), lost(1)), at(65.2))
        assert result.of_type(DeleteDriver) == []
        promoted = dataclasses.replace(standby(1, job=job), attempt=2, standby=False)
        after = observe(job, result.status, driver(1, job=job, hash_of=job), promoted)
        soon = run(reported(after, lost(1)), at(70))
        assert soon.of_type(DeleteDriver) == []
        assert soon.requeue_after is not None and soon.requeue_after <= 30

    def test_the_reported_drivers_exit_code_joins_the_last_failure_once_the_kubelet_has_it(
        self,
    ) -> None:
        # What killed it (OOMKilled, 137) is what a user looks for in kubectl describe.
        job = standby_job()
        result = run(reported(running_attempt_one(job, standby(1, job=job)), lost(1)), at(65.2))
        promoted = dataclasses.replace(standby(1, job=job), attempt=2, standby=False)
        dead = driver(1, "Failed", job=job, exit_code=137, reason="OOMKilled", hash_of=job)
        ended = run(reported(observe(job, result.status, dead, promoted), lost(1)), at(70))
        failure = ended.status.last_failure
        assert failure is not None and failure.reason == Reason.DRIVER_LOST and failure.attempt == 1
        assert failure.exit_code == 137
        assert "OOMKilled" in failure.message and "clicks-standby-1 reports" in failure.message
        assert failure.at == at(65)
        again = run(reported(observe(job, ended.status, dead, promoted), lost(1)), at(75))
        assert again.status.last_failure == failure  # said once
        assert "clicks-attempt-1" not in [a.name for a in ended.of_type(DeleteDriver)]

    def test_a_reported_driver_that_turns_out_alive_gives_its_restart_back_once(
        self,
    ) -> None:
        # Packet loss closed the beacon connection; the old driver ran on until the
        # takeover fenced it, and it exited saying so: the report was false.
        job = standby_job(**{"restartPolicy.maxRestarts": 1})
        result = run(reported(running_attempt_one(job, standby(1, job=job)), lost(1)), at(65.2))
        assert result.status.restarts == 1
        promoted = dataclasses.replace(standby(1, job=job), attempt=2, standby=False)
        fenced = driver(1, "Failed", job=job, exit_code=ExitCode.FENCED, hash_of=job)
        ended = run(reported(observe(job, result.status, fenced, promoted), lost(1)), at(70))
        assert ended.status.restarts == 0, "a false report does not spend maxRestarts"
        failure = ended.status.last_failure
        assert failure is not None and failure.exit_code == ExitCode.FENCED
        assert "the report was false" in failure.message
        (event,) = [a for a in ended.of_type(EmitEvent) if a.reason == Reason.FALSE_DRIVER_LOST]
        assert event.type == "Warning" and "clicks-attempt-1" in event.message
        again = run(reported(observe(job, ended.status, fenced, promoted), lost(1)), at(75))
        assert again.status.restarts == 0 and again.status.last_failure == failure
        assert not [a for a in again.of_type(EmitEvent) if a.reason == Reason.FALSE_DRIVER_LOST]

    def test_a_reported_driver_that_really_died_keeps_its_restart_counted(self) -> None:
        job = standby_job()
        result = run(reported(running_attempt_one(job, standby(1, job=job)), lost(1)), at(65.2))
        promoted = dataclasses.replace(standby(1, job=job), attempt=2, standby=False)
        dead = driver(1, "Failed", job=job, exit_code=137, hash_of=job)
        ended = run(reported(observe(job, result.status, dead, promoted), lost(1)), at(70))
        assert ended.status.restarts == 1

    def test_a_reported_driver_still_running_after_the_grace_is_stopped(self) -> None:
        # The report was false (a network fault): the old driver is fenced and now stopped.
        job = standby_job()
        result = run(reported(running_attempt_one(job, standby(1, job=job)), lost(1)), at(65.2))
        promoted = dataclasses.replace(standby(1, job=job), attempt=2, standby=False)
        later = run(reported(observe(job, result.status, driver(1, job=job, hash_of=job), promoted),
                             lost(1)), at(65.2 + 31))
        assert DeleteDriver(name="clicks-attempt-1", reason=Reason.STALE_ATTEMPT) in later.actions

    def test_a_report_about_an_earlier_attempt_changes_nothing(self) -> None:
        job = standby_job()
        observed = observe(job, status(Phase.RUNNING, 2, job=job),
                           driver(2, job=job, hash_of=job), standby(2, job=job))
        result = run(reported(observed, lost(1, by="clicks-standby-2")), at(65.2))
        assert result.of_type(PromoteStandby) == [] and result.of_type(DeleteDriver) == []
        assert result.status.attempt == 2 and result.status.phase is Phase.RUNNING

    def test_a_report_by_another_pod_than_the_ready_standby_changes_nothing(self) -> None:
        job = standby_job()
        result = run(reported(running_attempt_one(job, standby(1, job=job)),
                              lost(1, by="clicks-standby-0")), at(65.2))
        assert result.of_type(PromoteStandby) == []
        assert result.status.attempt == 1 and result.status.phase is Phase.RUNNING

    def test_a_report_from_a_standby_that_is_not_ready_is_not_acted_on(self) -> None:
        job = standby_job()
        result = run(reported(running_attempt_one(job, standby(1, job=job, ready=False)), lost(1)),
                     at(65.2))
        assert result.of_type(DeleteDriver) == []
        assert result.status.attempt == 1 and result.status.phase is Phase.RUNNING

    @pytest.mark.parametrize("policy", [{"restartPolicy.type": "Never"},
                                        {"restartPolicy.maxRestarts": 0}])
    def test_a_report_never_fails_a_job_the_policy_would_not_restart(
        self, policy: dict[str, object],
    ) -> None:
        # Nothing to take over: the kubelet's report, with its exit code, decides.
        job = standby_job(**policy)
        result = run(reported(running_attempt_one(job, standby(1, job=job)), lost(1)), at(65.2))
        assert result.status.phase is Phase.RUNNING and result.status.attempt == 1
        assert result.of_type(DeleteDriver) == [] and result.of_type(PromoteStandby) == []

    def test_a_report_in_a_store_that_is_not_the_jobs_changes_nothing(self) -> None:
        from cjob_lifecycle.observed import StoreOwnership

        job = standby_job()
        observed = reported(running_attempt_one(job, standby(1, job=job)), lost(1))
        foreign = dataclasses.replace(observed, store=dataclasses.replace(
            observed.store, ownership=StoreOwnership.OTHER))
        result = run(foreign, at(65.2))
        assert result.of_type(PromoteStandby) == []

    def test_a_suspending_job_takes_its_final_checkpoint_whatever_a_standby_reports(self) -> None:
        job = standby_job(suspend=True)
        result = run(reported(running_attempt_one(job, standby(1, job=job)), lost(1)), at(65.2))
        assert result.of_type(PromoteStandby) == []
        assert result.status.reason == Reason.SUSPENDING


class TestAReportIsAMoment:
    """A report is acted on while fresh, and never held back by the old driver."""

    def test_the_attempt_ended_when_the_standby_saw_it_not_when_the_operator_read_it(self) -> None:
        job = standby_job()
        result = run(reported(running_attempt_one(job, standby(1, job=job)), lost(1)), at(70.5))
        assert result.status.last_failure is not None
        assert result.status.last_failure.at == at(65)

    def test_a_report_older_than_the_grace_is_not_acted_on(self) -> None:
        # The kubelet has reported a driver that really died long before now; one still
        # running was not lost (the report was false, or about a moment long past).
        job = standby_job()
        late = at(65 + WITH_STANDBY.kill_grace_seconds + 1)
        result = run(reported(running_attempt_one(job, standby(1, job=job)), lost(1)), late)
        assert result.of_type(PromoteStandby) == [] and result.of_type(DeleteDriver) == []
        assert result.status.phase is Phase.RUNNING and result.status.attempt == 1

    def test_a_report_let_pass_while_the_restart_budget_was_spent_never_acts_later(self) -> None:
        # The report stays on the ConfigMap. Once resetAfter gives the budget back, it must
        # not promote the standby over the driver that has been healthy all along.
        job = standby_job(**{"restartPolicy.maxRestarts": 1})
        observed = running_attempt_one(job, standby(1, job=job))
        spent = dataclasses.replace(observed, status=observed.status.replace(restarts=1))
        first = run(reported(spent, lost(1)), at(65.2))
        assert first.status.phase is Phase.RUNNING and first.of_type(PromoteStandby) == []
        healthy = 5 + job.spec.restart_policy.reset_after.seconds + 1  # the driver started at 5
        reset = run(reported(dataclasses.replace(spent, status=first.status), lost(1)), at(healthy))
        assert reset.status.restarts == 0
        later = run(reported(dataclasses.replace(spent, status=reset.status), lost(1)),
                    at(healthy + 1))
        assert later.of_type(PromoteStandby) == [] and later.of_type(DeleteDriver) == []
        assert later.status.phase is Phase.RUNNING and later.status.attempt == 1

    def test_a_driver_pod_being_deleted_hands_over_to_the_ready_standby_at_once(self) -> None:
        # Its deletion can be seen before the standby's report. The old driver is fenced
        # before the promotion, so the standby need not wait for it to stop.
        job = standby_job()
        observed = observe(job, status(Phase.RUNNING, 1, job=job),
                           driver(1, job=job, hash_of=job, deleting=at(64)), standby(1, job=job))
        result = run(observed, at(65))
        assert result.of_type(PromoteStandby) == [
            PromoteStandby(name="clicks-standby-1", attempt=2, restore_pointer="latest")]
        assert "clicks-standby-1" not in [a.name for a in result.of_type(DeleteDriver)]
        names = kinds(result)
        assert names.index("AdvanceFence") < names.index("PromoteStandby")

    def test_a_second_report_within_the_grace_of_the_first_promotes_the_next_standby(self) -> None:
        # Attempt 1's driver, reported lost at 65, is still left to end when attempt 2's
        # driver (the standby promoted then) is reported lost by the next standby.
        job = standby_job()
        first = run(reported(running_attempt_one(job, standby(1, job=job)), lost(1)), at(65.2))
        promoted = dataclasses.replace(standby(1, job=job), attempt=2, standby=False)
        second_report = dataclasses.replace(lost(2, by="clicks-standby-2"), at=T0.timestamp() + 80)
        observed = observe(job, first.status.replace(phase=Phase.RUNNING),
                           driver(1, job=job, hash_of=job), promoted, standby(2, job=job))
        result = run(reported(observed, second_report), at(80.2))
        assert result.of_type(PromoteStandby) == [
            PromoteStandby(name="clicks-standby-2", attempt=3, restore_pointer="latest")]
        assert "clicks-standby-2" not in [a.name for a in result.of_type(DeleteDriver)]

    def test_a_starting_standby_is_kept_through_the_restart_backoff_and_then_promoted(self) -> None:
        job = standby_job()
        backing_off = run(failed_attempt_one(job, standby(1, job=job, ready=False)), at(65.4))
        assert backing_off.status.phase is Phase.RESTARTING
        assert "clicks-standby-1" not in [a.name for a in backing_off.of_type(DeleteDriver)]
        due = observe(job, backing_off.status,
                      driver(1, "Failed", job=job, exit_code=137, hash_of=job), standby(1, job=job))
        result = run(due, at(75.1))
        assert result.of_type(PromoteStandby) == [
            PromoteStandby(name="clicks-standby-1", attempt=2, restore_pointer="latest")]

    def test_a_job_that_cannot_restart_after_a_report_stops_the_reported_driver(self) -> None:
        # Here the store lost the checkpoint the job completed: the job fails (StoreLost),
        # and the driver the standby reported, should it still run, must not run on.
        from cjob_spec.status import CheckpointRef

        job = standby_job()
        observed = running_attempt_one(job, standby(1, job=job))
        recorded = observed.status.replace(
            latest_checkpoint=CheckpointRef(id=7, path="s3://c/chk-7"))
        emptied = dataclasses.replace(observed, status=recorded,
                                      store=dataclasses.replace(observed.store, exists=True))
        result = run(reported(emptied, lost(1)), at(65.2))
        assert result.status.phase is Phase.FAILED and result.status.reason == Reason.STORE_LOST
        assert "clicks-attempt-1" in [a.name for a in result.of_type(DeleteDriver)]
