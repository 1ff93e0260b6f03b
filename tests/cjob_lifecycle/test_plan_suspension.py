"""plan() for spec.suspend: a final checkpoint, no driver while suspended, and resuming
from the latest checkpoint."""

from __future__ import annotations

import pytest
from operator_world import IMAGE, at, checkpoint, driver, make_job, observe, reasons, run, status

from cjob_lifecycle.actions import CreateDriver, DeleteDriver, RequestCheckpoint
from cjob_lifecycle.observed import StoreView
from cjob_spec import ConditionStatus, Phase, Reason
from cjob_spec.exit_codes import ExitCode


class TestSuspendingARunningJob:
    """A running driver takes a final checkpoint, then stops."""

    def test_suspending_a_running_job_takes_a_final_checkpoint_then_stops_the_driver(self) -> None:
        job = make_job(suspend=True)
        pod = driver(2, job=job)
        store = StoreView(exists=True, latest=checkpoint(4, at(90)), fence_attempt=2)
        running = status(Phase.RUNNING, 2, job=job, running_since=at(5))

        asking = run(observe(job, running, pod, store=store), at(100))
        assert asking.of_type(RequestCheckpoint) == [
            RequestCheckpoint(pod="clicks-attempt-2", nonce="suspend-2")
        ]
        assert not asking.of_type(DeleteDriver)
        assert (asking.status.phase, asking.status.reason) == (Phase.RUNNING, Reason.SUSPENDING)
        progressing = asking.status.condition("Progressing")
        assert progressing is not None and progressing.status is ConditionStatus.TRUE
        assert asking.requeue_after == 5

        waiting = run(observe(job, asking.status, pod, store=store), at(105))
        assert not waiting.of_type(DeleteDriver) and not waiting.of_type(RequestCheckpoint)

        # The checkpoint is in the store, but the sinks commit it only now: the driver
        # is left to do so, and to end by itself.
        final = StoreView(exists=True, latest=checkpoint(5, at(106)), fence_attempt=2)
        committing = run(observe(job, waiting.status, pod, store=final), at(107))
        assert not committing.of_type(DeleteDriver)
        assert committing.status.reason == Reason.SUSPENDING
        assert committing.requeue_after == 5

        stopped = driver(2, "Failed", exit_code=ExitCode.SUSPENDED, job=job)
        done = run(observe(job, committing.status, stopped, store=final), at(109))
        # The pod goes: a suspended job has no driver, and kubectl would list the
        # driver's exit code as an error.
        assert done.of_type(DeleteDriver) == [
            DeleteDriver(name="clicks-attempt-2", reason=Reason.SUSPENDED)]
        assert done.status.phase is Phase.SUSPENDED
        assert "final checkpoint 5, its output committed" in (done.status.message or "")
        assert done.status.latest_checkpoint is not None and done.status.latest_checkpoint.id == 5
        assert done.status.last_failure is None
        assert not done.of_type(CreateDriver)

    def test_a_driver_that_does_not_stop_after_the_final_checkpoint_is_stopped_in_time(
            self) -> None:
        job = make_job(suspend=True, **{"checkpoint.timeout": "1m"})
        pod = driver(1, job=job)
        asked = status(Phase.RUNNING, 1, job=job, reason=Reason.SUSPENDING,
                       suspend_requested_at=at(100))
        final = StoreView(exists=True, latest=checkpoint(5, at(110)), fence_attempt=1)
        waiting = run(observe(job, asked, pod, store=final), at(169))
        assert not waiting.of_type(DeleteDriver)
        result = run(observe(job, waiting.status, pod, store=final), at(170))
        assert result.of_type(DeleteDriver) == [
            DeleteDriver(name="clicks-attempt-1", reason=Reason.SUSPENDED)]
        assert result.status.phase is Phase.SUSPENDED
        assert "did not stop within 1m" in (result.status.message or "")

    def test_suspending_gives_up_on_the_final_checkpoint_after_the_checkpoint_timeout(self) -> None:
        job = make_job(suspend=True, **{"checkpoint.timeout": "1m"})
        pod = driver(1, job=job)
        asked = status(Phase.RUNNING, 1, job=job, reason=Reason.SUSPENDING,
                       suspend_requested_at=at(100))
        store = StoreView(exists=True, latest=checkpoint(4, at(90)), fence_attempt=1)
        result = run(observe(job, asked, pod, store=store), at(160))
        assert result.of_type(DeleteDriver) == [
            DeleteDriver(name="clicks-attempt-1", reason=Reason.SUSPENDED)
        ]
        assert result.status.phase is Phase.SUSPENDED
        assert "resuming restores checkpoint 4" in (result.status.message or "")

    @pytest.mark.parametrize("phase", ["Pending", "Unknown"])
    def test_suspending_a_driver_that_is_not_running_stops_it_at_once(self, phase: str) -> None:
        job = make_job(suspend=True)
        result = run(observe(job, status(Phase.PENDING, job=job), driver(1, phase, job=job)),
                     at(10))
        assert [a.name for a in result.of_type(DeleteDriver)] == ["clicks-attempt-1"]
        assert result.status.phase is Phase.SUSPENDED
        assert not result.of_type(RequestCheckpoint)

    def test_a_driver_that_crashes_while_suspending_is_not_restarted(self) -> None:
        job = make_job(suspend=True)
        asked = status(Phase.RUNNING, 1, job=job, reason=Reason.SUSPENDING,
                       suspend_requested_at=at(100))
        pod = driver(1, "Failed", exit_code=1, job=job)
        result = run(observe(job, asked, pod), at(101))
        assert result.status.phase is Phase.SUSPENDED
        assert result.status.last_failure is not None
        assert not result.of_type(CreateDriver)


class TestSuspendingAJobThatIsNotRunning:
    """A job between attempts, or failed, is suspended at once."""

    def test_suspending_during_backoff_cancels_the_restart(self) -> None:
        job = make_job(suspend=True)
        backing_off = status(Phase.RESTARTING, 1, job=job, next_restart_at=at(100))
        result = run(observe(job, backing_off, driver(1, "Failed", exit_code=1, job=job)), at(50))
        assert result.status.phase is Phase.SUSPENDED
        assert result.status.next_restart_at is None
        assert not result.of_type(CreateDriver)

    def test_a_suspended_job_keeps_no_driver_running(self) -> None:
        job = make_job(suspend=True)
        result = run(observe(job, status(Phase.SUSPENDED, 2, job=job), driver(2, job=job)), at(200))
        assert result.of_type(DeleteDriver) == [
            DeleteDriver(name="clicks-attempt-2", reason=Reason.SUSPENDED)
        ]

    def test_suspending_a_failed_job_then_resuming_retries_it(self) -> None:
        failed = status(Phase.FAILED, 2, reason=Reason.USER_CODE_ERROR)
        suspended = run(observe(make_job(suspend=True), failed), at(10))
        assert suspended.status.phase is Phase.SUSPENDED
        resumed = run(observe(make_job(), suspended.status), at(20))
        assert resumed.of_type(CreateDriver)[0].attempt == 3


class TestResuming:
    """Resuming starts the next attempt from the latest checkpoint, once no driver is left."""

    def test_a_suspended_job_resumes_from_its_latest_checkpoint_with_a_fresh_budget(self) -> None:
        job = make_job()
        suspended = status(Phase.SUSPENDED, 2, job=job, restarts=3)
        store = StoreView(exists=True, latest=checkpoint(5, at(106)), fence_attempt=2)
        result = run(
            observe(job, suspended, driver(2, "Failed", exit_code=143, job=job), store=store),
            at(200),
        )
        assert result.of_type(CreateDriver) == [
            CreateDriver(
                name="clicks-attempt-3", attempt=3, restore_pointer="latest", image=IMAGE
            )
        ]
        assert result.status.restarts == 0
        assert reasons(result) == [Reason.RESUMED]

    def test_a_driver_that_stopped_for_a_withdrawn_suspend_starts_again_at_once(self) -> None:
        job = make_job(**{"restartPolicy.type": "Never"})
        suspending = status(Phase.RUNNING, 2, job=job, reason=Reason.SUSPENDING, restarts=1,
                            suspend_requested_at=at(100))
        stopped = driver(2, "Failed", exit_code=ExitCode.SUSPENDED, job=job)
        store = StoreView(exists=True, latest=checkpoint(5, at(106)), fence_attempt=2)
        result = run(observe(job, suspending, stopped, store=store), at(110))
        assert [a.attempt for a in result.of_type(CreateDriver)] == [3]
        assert result.status.restarts == 1
        assert result.status.last_failure is None

    def test_resuming_waits_for_the_suspended_driver_to_stop(self) -> None:
        job = make_job()
        suspended = status(Phase.SUSPENDED, 2, job=job)
        stopping = driver(2, job=job, deleting=at(230))
        result = run(observe(job, suspended, stopping), at(200))
        assert not result.of_type(CreateDriver)
        assert result.status.phase is Phase.SUSPENDED
