"""plan() when the spec changes: a last-state upgrade of an active job, and a new chance
for a failed one."""

from __future__ import annotations

from typing import Any

from operator_world import at, checkpoint, driver, make_job, observe, reasons, run, status

from cjob_lifecycle.actions import CreateDriver, DeleteDriver, EmitEvent, RequestCheckpoint
from cjob_lifecycle.observed import StoreView
from cjob_spec import JobStatus, Phase, Reason


class TestAnActiveJobsSpecChange:
    """The attempt stops and the new spec restarts from the latest checkpoint."""

    def test_a_spec_change_stops_the_attempt_and_restarts_from_the_latest_checkpoint(self) -> None:
        old = make_job()
        new = make_job(image="example.org/clicks:2.0")
        running = status(Phase.RUNNING, 3, job=old, restarts=1)
        pod = driver(3, job=old)
        store = StoreView(exists=True, latest=checkpoint(9, at(50)), fence_attempt=3)
        stopping = run(observe(new, running, pod, store=store), at(60))
        assert stopping.of_type(DeleteDriver) == [
            DeleteDriver(name="clicks-attempt-3", reason=Reason.SPEC_CHANGED)
        ]
        assert not stopping.of_type(CreateDriver)
        assert (stopping.status.phase, stopping.status.reason) == (
            Phase.RESTARTING, Reason.UPGRADING)
        assert reasons(stopping) == [Reason.UPGRADING]

        terminating = driver(3, job=old, deleting=at(120))
        still = run(observe(new, stopping.status, terminating, store=store), at(62))
        assert not still.of_type(CreateDriver)
        assert reasons(still) == []

        started = run(observe(new, stopping.status, store=store), at(70))
        assert started.of_type(CreateDriver) == [
            CreateDriver(
                name="clicks-attempt-4", attempt=4, restore_pointer="latest",
                image="example.org/clicks:2.0",
            )
        ]
        assert started.status.restarts == 1
        assert reasons(started) == [Reason.UPGRADED]

    def test_a_spec_change_while_pending_replaces_the_pending_driver(self) -> None:
        old = make_job()
        new = make_job(parallelism=1)
        result = run(observe(new, status(Phase.PENDING, job=old), driver(1, "Pending", job=old)),
                     at(5))
        assert result.of_type(DeleteDriver) == [
            DeleteDriver(name="clicks-attempt-1", reason=Reason.SPEC_CHANGED)
        ]

    def test_a_spec_change_during_backoff_is_simply_used_by_the_next_attempt(self) -> None:
        old = make_job()
        new = make_job(image="example.org/clicks:2.0")
        backing_off = status(Phase.RESTARTING, 1, job=old, next_restart_at=at(100))
        result = run(observe(new, backing_off, driver(1, "Failed", exit_code=1, job=old)), at(50))
        assert not result.of_type(CreateDriver) and not result.of_type(DeleteDriver)


class TestAScale:
    """``kubectl scale`` sets spec.parallelism: a last-state upgrade at the new
    parallelism, which status.parallelism (the scale subresource's replicas) follows
    once the rescaled attempt starts."""

    def test_a_scaled_job_restarts_from_the_latest_checkpoint_and_reports_its_replicas(
            self) -> None:
        two = make_job(parallelism=2)
        three = make_job(parallelism=3, **{"spark.executor.instances": 3})
        first = run(observe(two, JobStatus()), at(0))
        assert (first.status.parallelism, first.status.selector) == (
            2, "checkpointed.io/job=clicks")
        running = status(Phase.RUNNING, 3, job=two, parallelism=2,
                         selector="checkpointed.io/job=clicks")
        store = StoreView(exists=True, latest=checkpoint(9, at(50)), fence_attempt=3)
        stopping = run(observe(three, running, driver(3, job=two), store=store), at(60))
        assert stopping.of_type(DeleteDriver)
        assert stopping.status.parallelism == 2, "the running attempt still has 2"
        started = run(observe(three, stopping.status, store=store), at(70))
        (created,) = started.of_type(CreateDriver)
        assert created.restore_pointer == "latest"
        assert started.status.parallelism == 3


class TestASnapshotUpgrade:
    """upgradeMode Snapshot: a final checkpoint through the suspend path, committed by
    the sinks, then the new spec from it; LastState when none comes in time."""

    OLD = make_job(upgradeMode="Snapshot")
    NEW = make_job(upgradeMode="Snapshot", image="example.org/clicks:2.0")
    STORE = StoreView(exists=True, latest=checkpoint(9, at(50)), fence_attempt=3)

    def asked(self) -> Any:
        running = status(Phase.RUNNING, 3, job=self.OLD, restarts=1,
                         latest_checkpoint=checkpoint(9, at(50)))
        return run(observe(self.NEW, running, driver(3, job=self.OLD), store=self.STORE), at(60))

    def test_a_spec_change_asks_the_running_driver_for_a_final_checkpoint_first(self) -> None:
        asking = self.asked()
        assert asking.of_type(RequestCheckpoint) == [
            RequestCheckpoint(pod="clicks-attempt-3", nonce="suspend-3")]
        assert not asking.of_type(DeleteDriver) and not asking.of_type(CreateDriver)
        assert (asking.status.phase, asking.status.reason) == (Phase.RUNNING, Reason.UPGRADING)
        assert reasons(asking) == [Reason.UPGRADING]

    def test_once_the_driver_stopped_after_it_the_new_spec_starts_from_it_at_once(
            self) -> None:
        asking = self.asked()
        final = checkpoint(10, at(62))
        after = asking.status.replace(latest_checkpoint=final)
        stopped = driver(3, "Failed", job=self.OLD, exit_code=8, finished=at(64))
        ended = run(observe(self.NEW, after, stopped,
                            store=StoreView(exists=True, latest=final, fence_attempt=3)), at(65))
        (created,) = ended.of_type(CreateDriver)
        assert (created.attempt, created.restore_pointer) == (4, "latest")
        assert created.image == "example.org/clicks:2.0"
        assert ended.status.restarts == 1, "an upgrade is no restart"
        assert ended.status.last_failure is None
        assert Reason.UPGRADED in reasons(ended)
        assert "checkpoint 10" in ended.status.message

    def test_without_a_final_checkpoint_in_time_it_falls_back_to_the_latest_one(self) -> None:
        asking = self.asked()
        timeout = self.NEW.spec.checkpoint.timeout.seconds
        late = run(observe(self.NEW, asking.status, driver(3, job=self.OLD), store=self.STORE),
                   at(60 + timeout + 1))
        assert late.of_type(DeleteDriver) == [
            DeleteDriver(name="clicks-attempt-3", reason=Reason.SPEC_CHANGED)]
        (said,) = [e for e in late.of_type(EmitEvent) if e.reason == Reason.UPGRADING]
        assert "no final checkpoint completed within" in said.message
        assert (late.status.phase, late.status.reason) == (Phase.RESTARTING, Reason.UPGRADING)

    def test_a_driver_not_running_yet_is_replaced_at_once(self) -> None:
        pending = status(Phase.PENDING, 3, job=self.OLD)
        result = run(observe(self.NEW, pending, driver(3, "Pending", job=self.OLD)), at(5))
        assert result.of_type(DeleteDriver) == [
            DeleteDriver(name="clicks-attempt-3", reason=Reason.SPEC_CHANGED)]
        assert not result.of_type(RequestCheckpoint)

    def test_changing_only_the_upgrade_mode_changes_nothing_that_runs(self) -> None:
        running = status(Phase.RUNNING, 3, job=make_job())
        result = run(observe(self.OLD, running, driver(3, job=make_job())), at(60))
        assert not result.of_type(DeleteDriver) and not result.of_type(RequestCheckpoint)


class TestAFinishedJobsSpecChange:
    """A changed spec retries a failed job; nothing restarts a succeeded one."""

    def test_fixing_the_spec_of_a_failed_job_retries_it_with_a_fresh_budget(self) -> None:
        old = make_job()
        fixed = make_job(image="example.org/clicks:1.1")
        failed = status(Phase.FAILED, 6, job=old, restarts=5, reason=Reason.RESTART_LIMIT_EXCEEDED)
        result = run(observe(fixed, failed, driver(6, "Failed", exit_code=1, job=old)), at(50))
        assert result.of_type(CreateDriver)[0].attempt == 7
        assert result.status.restarts == 0
        assert reasons(result) == [Reason.RETRYING]

    def test_a_failed_job_with_an_unchanged_spec_stays_failed(self) -> None:
        failed = status(Phase.FAILED, 2, reason=Reason.USER_CODE_ERROR)
        result = run(observe(make_job(), failed, driver(2, "Failed", exit_code=3)), at(50))
        assert result.actions == ()
        assert result.status.phase is Phase.FAILED

    def test_a_restore_refused_for_incompatible_state_fails_the_job_at_once(self) -> None:
        running = status(Phase.RUNNING, 2)
        result = run(observe(make_job(), running, driver(2, "Failed", exit_code=10)), at(50))
        assert (result.status.phase, result.status.reason) == (
            Phase.FAILED, Reason.INCOMPATIBLE_STATE)
        assert not result.of_type(CreateDriver)

    def test_allowing_non_restored_state_after_such_a_failure_retries_the_restore(
            self) -> None:
        refused = status(Phase.FAILED, 2, reason=Reason.INCOMPATIBLE_STATE)
        unchanged = run(observe(make_job(), refused, driver(2, "Failed", exit_code=10)), at(50))
        assert unchanged.actions == ()
        allowing = make_job(restore={"allowNonRestoredState": True})
        result = run(observe(allowing, refused, driver(2, "Failed", exit_code=10, job=allowing)),
                     at(60))
        assert result.of_type(CreateDriver)[0].attempt == 3
        assert result.of_type(CreateDriver)[0].restore_pointer == "latest"
        assert reasons(result) == [Reason.RETRYING]

    def test_a_succeeded_job_is_left_alone(self) -> None:
        done = status(Phase.SUCCEEDED, 1)
        result = run(observe(make_job(image="other:1"), done, driver(1, "Succeeded")), at(50))
        assert result.actions == ()


class TestAStatelessUpgrade:
    """upgradeMode Stateless: the new spec starts with empty state, and so does every
    attempt until it completes a checkpoint of its own."""

    OLD = make_job(upgradeMode="Stateless")
    NEW = make_job(upgradeMode="Stateless", image="example.org/clicks:2.0")
    STORE = StoreView(exists=True, latest=checkpoint(9, at(50)), fence_attempt=3)

    def stopped(self) -> Any:
        running = status(Phase.RUNNING, 3, job=self.OLD, latest_checkpoint=checkpoint(9, at(50)))
        return run(observe(self.NEW, running, driver(3, job=self.OLD), store=self.STORE), at(60))

    def test_the_driver_stops_and_the_new_spec_starts_with_nothing_restored(self) -> None:
        stopping = self.stopped()
        assert stopping.of_type(DeleteDriver) == [
            DeleteDriver(name="clicks-attempt-3", reason=Reason.SPEC_CHANGED)]
        assert stopping.status.discarded_through == 9
        (said,) = [e for e in stopping.of_type(EmitEvent) if e.reason == Reason.UPGRADING]
        assert "empty state" in said.message
        started = run(observe(self.NEW, stopping.status, store=self.STORE), at(61))
        (created,) = started.of_type(CreateDriver)
        assert created.restore_pointer == "none"

    def test_a_restart_before_the_new_specs_first_checkpoint_starts_empty_again(self) -> None:
        stopping = self.stopped()
        started = run(observe(self.NEW, stopping.status, store=self.STORE), at(61))
        failed = driver(4, "Failed", job=self.NEW, exit_code=1, created=at(61))
        again = run(observe(self.NEW, started.status, failed, store=self.STORE), at(200))
        (created,) = again.of_type(CreateDriver)
        assert (created.attempt, created.restore_pointer) == (5, "none")

    def test_a_checkpoint_the_stopping_driver_completes_after_the_change_is_discarded_too(
            self) -> None:
        # The old driver, deleted for the change, still completes checkpoint 10 before it
        # dies: it holds the old spec's state, so the new spec must not restore it.
        stopping = self.stopped()
        late = StoreView(exists=True, latest=checkpoint(10, at(60)), fence_attempt=3,
                         latest_attempt=3)
        waiting = run(observe(self.NEW, stopping.status, store=late), at(61))
        assert waiting.status.discarded_through is not None
        (created,) = waiting.of_type(CreateDriver)
        assert created.restore_pointer == "none"
        # The new attempt's own first checkpoint ends the discard.
        own = StoreView(exists=True, latest=checkpoint(11, at(90)), fence_attempt=4,
                        latest_attempt=4)
        running = run(observe(self.NEW, waiting.status, driver(4, job=self.NEW, created=at(61)),
                              store=own), at(95))
        assert running.status.discarded_through is None

    def test_once_the_new_spec_checkpointed_its_own_state_restores(self) -> None:
        stopping = self.stopped()
        started = run(observe(self.NEW, stopping.status, store=self.STORE), at(61))
        own = StoreView(exists=True, latest=checkpoint(10, at(90)), fence_attempt=4,
                        latest_attempt=4)
        running = run(observe(self.NEW, started.status, driver(4, job=self.NEW, created=at(61)),
                              store=own), at(95))
        assert running.status.discarded_through is None
        failed = driver(4, "Failed", job=self.NEW, exit_code=1, created=at(61))
        later = run(observe(self.NEW, running.status, failed, store=own), at(200))
        (created,) = later.of_type(CreateDriver)
        assert (created.attempt, created.restore_pointer) == (5, "latest")
