"""plan() while an attempt's driver pod starts and runs: waiting, timing out, becoming
Running and Ready, and passing on manual checkpoint requests."""

from __future__ import annotations

from operator_world import at, driver, kinds, make_job, observe, reasons, run, status

from cjob_lifecycle.actions import CreateDriver, DeleteDriver, RequestCheckpoint
from cjob_lifecycle.observed import ExecutorPod
from cjob_spec import ConditionStatus, Phase, Reason


class TestAStartingDriver:
    """A driver pod is given time to appear and to start, and no more."""

    def test_a_driver_just_created_but_not_yet_seen_is_waited_for(self) -> None:
        result = run(observe(make_job(), status(Phase.PENDING)), at(10))
        assert kinds(result) == ["RequeueAfter"]
        assert result.requeue_after == 20
        assert result.status.phase is Phase.PENDING

    def test_a_driver_that_never_appears_counts_as_a_failure(self) -> None:
        result = run(observe(make_job(), status(Phase.PENDING)), at(31))
        new = result.status
        assert new.phase is Phase.RESTARTING
        assert new.last_failure is not None and new.last_failure.reason == Reason.DRIVER_POD_MISSING
        assert new.restarts == 1
        assert new.next_restart_at == at(41)

    def test_a_pending_driver_reports_why_it_waits(self) -> None:
        pod = driver(1, "Pending", reason="ImagePullBackOff", message="back-off pulling image")
        result = run(observe(make_job(), status(Phase.PENDING), pod), at(60))
        new = result.status
        assert new.phase is Phase.PENDING
        assert new.reason == "ImagePullBackOff"
        assert "back-off pulling image" in (new.message or "")
        assert result.requeue_after == 60  # resync comes before the start timeout (5m)
        assert "DeleteDriver" not in kinds(result)

    def test_a_driver_that_does_not_start_in_time_is_replaced(self) -> None:
        pod = driver(1, "Pending", reason="ImagePullBackOff")
        result = run(observe(make_job(), status(Phase.PENDING), pod), at(300))
        assert DeleteDriver(name="clicks-attempt-1", reason=Reason.START_TIMEOUT) in result.actions
        new = result.status
        assert new.phase is Phase.RESTARTING
        assert new.last_failure is not None
        assert new.last_failure.reason == Reason.START_TIMEOUT
        assert "did not start within 5m (ImagePullBackOff)" in new.last_failure.message


class TestARunningDriver:
    """A running driver makes the job Running and Ready, quietly once it is."""

    def test_a_running_driver_makes_the_job_running_and_ready(self) -> None:
        result = run(observe(make_job(), status(Phase.PENDING), driver(1)), at(10))
        new = result.status
        assert new.phase is Phase.RUNNING
        assert new.running_since == at(5)
        ready = new.condition("Ready")
        assert ready is not None and ready.status is ConditionStatus.TRUE
        assert reasons(result) == [Reason.RUNNING]
        assert not result.of_type(CreateDriver) and not result.of_type(DeleteDriver)

    def test_a_steady_running_job_emits_no_events_and_keeps_condition_times(self) -> None:
        first = run(observe(make_job(), status(Phase.PENDING), driver(1)), at(10))
        second = run(observe(make_job(), first.status, driver(1)), at(70))
        assert reasons(second) == []
        assert [a for a in second.actions if type(a).__name__ != "RequeueAfter"] == []
        assert second.status.conditions == first.status.conditions

    def test_a_running_job_is_looked_at_again_within_the_resync_period(self) -> None:
        result = run(observe(make_job(), status(Phase.RUNNING), driver(1)), at(10))
        assert result.requeue_after is not None and 0 < result.requeue_after <= 60

    def test_a_healthy_attempt_resets_the_restart_count(self) -> None:
        running = status(Phase.RUNNING, 3, restarts=2)
        pod = driver(3, started=at(0))
        early = run(observe(make_job(), running, pod), at(599))
        assert early.status.restarts == 2
        late = run(observe(make_job(), running, pod), at(600))
        assert late.status.restarts == 0
        assert reasons(late) == [Reason.RESTART_COUNT_RESET]


class TestManualCheckpoints:
    """A new trigger nonce asks the running driver for one checkpoint."""

    def test_a_new_trigger_nonce_requests_one_checkpoint(self) -> None:
        job = make_job(**{"checkpoint.triggerNonce": "now-1"})
        result = run(observe(job, status(Phase.RUNNING, job=job), driver(1, job=job)), at(10))
        assert result.of_type(RequestCheckpoint) == [
            RequestCheckpoint(pod="clicks-attempt-1", nonce="now-1")
        ]
        assert result.status.last_trigger_nonce == "now-1"
        again = run(observe(job, result.status, driver(1, job=job)), at(20))
        assert again.of_type(RequestCheckpoint) == []

    def test_a_trigger_nonce_waits_until_the_driver_runs(self) -> None:
        job = make_job(**{"checkpoint.triggerNonce": "now-1"})
        result = run(
            observe(job, status(Phase.PENDING, job=job), driver(1, "Pending", job=job)), at(10)
        )
        assert result.of_type(RequestCheckpoint) == []
        assert result.status.last_trigger_nonce is None

    def test_changing_the_trigger_nonce_does_not_restart_the_job(self) -> None:
        old = make_job()
        new = make_job(**{"checkpoint.triggerNonce": "n2"})
        result = run(observe(new, status(Phase.RUNNING, job=old), driver(1, job=old)), at(10))
        assert not result.of_type(DeleteDriver)
        assert result.status.phase is Phase.RUNNING


class TestExecutorsTheSchedulerCannotPlace:
    """The barrier stage needs every executor at once: one the scheduler cannot place
    holds the job, which would say Running for ever."""

    @staticmethod
    def unplaced(since: float, *, attempt: int = 1) -> ExecutorPod:
        return ExecutorPod(name=f"clicks-exec-{attempt}", phase="Pending", attempt=attempt,
                           unschedulable_since=at(since),
                           unschedulable_message="0/1 nodes are available: 1 Insufficient cpu.")

    def test_an_executor_waiting_less_than_the_start_timeout_is_waited_for(self) -> None:
        observed = observe(make_job(), status(Phase.RUNNING), driver(1),
                           executors=(self.unplaced(10),))
        result = run(observed, at(100))
        assert result.status.phase is Phase.RUNNING
        assert "DeleteDriver" not in kinds(result)
        assert result.requeue_after is not None and result.requeue_after <= 210

    def test_past_the_start_timeout_the_job_fails_saying_what_is_missing(self) -> None:
        observed = observe(make_job(), status(Phase.RUNNING), driver(1),
                           executors=(self.unplaced(10),))
        result = run(observed, at(311))
        new = result.status
        assert new.phase is Phase.FAILED
        assert new.reason == Reason.EXECUTORS_UNSCHEDULABLE
        assert new.restarts == 0, "a restart would wait for the same capacity"
        assert new.last_failure is not None
        assert "Insufficient cpu" in new.last_failure.message
        assert "clicks-exec-1" in new.last_failure.message
        assert DeleteDriver(name="clicks-attempt-1",
                            reason=Reason.EXECUTORS_UNSCHEDULABLE) in result.actions

    def test_an_executor_of_an_older_attempt_does_not_count(self) -> None:
        observed = observe(make_job(), status(Phase.RUNNING, 2), driver(2),
                           executors=(self.unplaced(10, attempt=1),))
        result = run(observed, at(1000))
        assert result.status.phase is Phase.RUNNING

    def test_a_failed_job_whose_spec_changes_is_retried(self) -> None:
        failed = run(observe(make_job(), status(Phase.RUNNING), driver(1),
                             executors=(self.unplaced(10),)), at(311)).status
        smaller = make_job(**{"spark.executor.memory": "512Mi"})
        result = run(observe(smaller, failed), at(320))
        assert result.status.reason == Reason.RETRYING
        assert "CreateDriver" in kinds(result)
