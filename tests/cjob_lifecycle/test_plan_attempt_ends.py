"""plan() when an attempt ends: finishing, restarting with backoff, failing for good,
and the drivers that are lost rather than ended."""

from __future__ import annotations

import dataclasses

import pytest
from operator_world import (
    IMAGE,
    at,
    checkpoint,
    driver,
    kinds,
    make_job,
    observe,
    reasons,
    run,
    status,
)

from cjob_lifecycle.actions import AdvanceFence, CreateDriver, DeleteDriver, EmitEvent
from cjob_lifecycle.observed import StoreView
from cjob_spec import ConditionStatus, Phase, Reason


class TestADriverThatExitsZero:
    """A clean exit finishes the job, unless the policy is Always."""

    def test_a_driver_that_exits_zero_finishes_the_job(self) -> None:
        result = run(observe(make_job(), status(Phase.RUNNING), driver(1, "Succeeded")), at(100))
        assert result.status.phase is Phase.SUCCEEDED
        assert reasons(result) == [Reason.SUCCEEDED]
        assert result.requeue_after is None
        assert not result.of_type(CreateDriver)

    def test_always_restarts_a_driver_that_exits_zero(self) -> None:
        job = make_job(**{"restartPolicy.type": "Always"})
        result = run(
            observe(job, status(Phase.RUNNING, job=job), driver(1, "Succeeded", job=job)), at(66)
        )
        assert result.status.phase is Phase.RESTARTING
        assert result.status.last_failure is None


class TestRestartsAfterAFailure:
    """A failed attempt is followed by the next one after a growing backoff."""

    def test_a_failed_driver_is_restarted_after_backoff_from_the_latest_checkpoint(self) -> None:
        pod = driver(1, "Failed", exit_code=1, finished=at(65))
        store = StoreView(exists=True, latest=checkpoint(7, at(60)), fence_attempt=1)
        failing = run(observe(make_job(), status(Phase.RUNNING), pod, store=store), at(66))
        new = failing.status
        assert new.phase is Phase.RESTARTING
        assert new.reason == Reason.BACKING_OFF
        assert (new.restarts, new.next_restart_at) == (1, at(75))
        assert new.last_failure is not None
        assert (new.last_failure.reason, new.last_failure.exit_code) == (Reason.DRIVER_FAILED, 1)
        assert new.last_failure.attempt == 1
        assert failing.requeue_after == 9
        assert not failing.of_type(CreateDriver)
        assert reasons(failing) == [Reason.DRIVER_FAILED]

        waiting = run(observe(make_job(), new, pod, store=store), at(70))
        assert not waiting.of_type(CreateDriver)
        assert waiting.requeue_after == 5

        restarted = run(observe(make_job(), new, pod, store=store), at(75))
        assert restarted.of_type(AdvanceFence) == [AdvanceFence(attempt=2)]
        assert restarted.of_type(CreateDriver) == [
            CreateDriver(
                name="clicks-attempt-2", attempt=2, restore_pointer="latest", image=IMAGE
            )
        ]
        assert kinds(restarted).index("AdvanceFence") < kinds(restarted).index("CreateDriver")
        after = restarted.status
        assert (after.phase, after.attempt, after.restarts) == (Phase.PENDING, 2, 1)
        assert after.message is not None and after.message.endswith("from checkpoint 7")
        assert after.restored_from is None, "set only once the driver of attempt 2 reports"
        assert after.last_restart_at == at(75)
        assert after.last_failure == new.last_failure
        assert reasons(restarted) == [Reason.RESTARTED]

    def test_consecutive_failures_back_off_exponentially(self) -> None:
        delays = []
        job_status = status(Phase.RUNNING)
        for attempt in range(1, 5):
            pod = driver(attempt, "Failed", exit_code=1, created=at(0), started=at(1),
                         finished=at(2))
            job_status = job_status.replace(attempt=attempt, driver_pod=pod.name,
                                            phase=Phase.RUNNING)
            result = run(observe(make_job(), job_status, pod), at(2))
            assert result.status.next_restart_at is not None
            delays.append((result.status.next_restart_at - at(2)).total_seconds())
            job_status = result.status
        assert delays == [10, 20, 40, 80]

    def test_a_failure_noticed_after_its_backoff_restarts_in_the_same_pass(self) -> None:
        pod = driver(1, "Failed", exit_code=1, finished=at(65))
        result = run(observe(make_job(), status(Phase.RUNNING), pod), at(200))
        assert result.of_type(CreateDriver)[0].attempt == 2
        assert reasons(result) == [Reason.DRIVER_FAILED, Reason.RESTARTED]
        assert result.status.last_failure is not None

    def test_a_backoff_of_zero_restarts_in_the_same_pass(self) -> None:
        job = make_job(**{"restartPolicy.backoff": {"initial": "0s", "max": "0s"}})
        pod = driver(1, "Failed", exit_code=1, job=job)
        result = run(observe(job, status(Phase.RUNNING, job=job), pod), at(100))
        assert result.of_type(CreateDriver)[0].attempt == 2
        assert result.status.restarts == 1

    def test_a_failure_after_a_long_healthy_run_starts_the_backoff_over(self) -> None:
        pod = driver(4, "Failed", exit_code=1, started=at(0), finished=at(3600))
        result = run(observe(make_job(), status(Phase.RUNNING, 4, restarts=4), pod), at(3600))
        assert result.status.restarts == 1
        assert result.status.next_restart_at == at(3610)


class TestFailuresThatEndTheJob:
    """Permanent failures, a spent restart budget and Never end the job Failed."""

    @pytest.mark.parametrize(
        ("exit_code", "reason"),
        [(2, Reason.INVALID_CONFIGURATION), (3, Reason.USER_CODE_ERROR),
         (6, Reason.RESTORE_FAILED)],
    )
    def test_permanent_failures_fail_the_job_at_once(self, exit_code: int, reason: str) -> None:
        pod = driver(1, "Failed", exit_code=exit_code)
        result = run(observe(make_job(), status(Phase.RUNNING), pod), at(100))
        new = result.status
        assert (new.phase, new.reason) == (Phase.FAILED, reason)
        assert new.last_failure is not None and new.last_failure.exit_code == exit_code
        failed = new.condition("Failed")
        assert failed is not None and failed.status is ConditionStatus.TRUE
        assert failed.reason == reason
        assert result.requeue_after is None
        assert not result.of_type(CreateDriver)

    def test_the_job_fails_once_max_restarts_are_spent(self) -> None:
        pod = driver(6, "Failed", exit_code=1)
        result = run(observe(make_job(), status(Phase.RUNNING, 6, restarts=5), pod), at(100))
        assert (result.status.phase, result.status.reason) == (
            Phase.FAILED, Reason.RESTART_LIMIT_EXCEEDED)
        assert reasons(result) == [Reason.RESTART_LIMIT_EXCEEDED]

    def test_never_fails_the_job_on_the_first_failure(self) -> None:
        job = make_job(**{"restartPolicy.type": "Never"})
        pod = driver(1, "Failed", exit_code=137, reason="OOMKilled", job=job)
        result = run(observe(job, status(Phase.RUNNING, job=job), pod), at(100))
        assert (result.status.phase, result.status.reason) == (Phase.FAILED, Reason.OOM_KILLED)


class TestHowAFailureIsReported:
    """The reason a user sees is the most telling one, announced by an Event."""

    @pytest.mark.parametrize(
        ("pod_reason", "exit_code", "expected"),
        [
            ("OOMKilled", 137, Reason.OOM_KILLED),
            ("Evicted", None, Reason.EVICTED),
            ("Error", 137, Reason.KILLED),
            ("Error", 5, Reason.STORAGE_UNREACHABLE),
        ],
    )
    def test_the_failure_reason_is_the_most_telling_one(
        self, pod_reason: str, exit_code: int | None, expected: str
    ) -> None:
        pod = driver(1, "Failed", exit_code=exit_code, reason=pod_reason)
        result = run(observe(make_job(), status(Phase.RUNNING), pod), at(66))
        assert result.status.last_failure is not None
        assert result.status.last_failure.reason == expected
        assert result.status.phase is Phase.RESTARTING

    def test_events_are_the_only_way_decisions_are_announced(self) -> None:
        result = run(
            observe(make_job(), status(Phase.RUNNING), driver(1, "Failed", exit_code=4)), at(66)
        )
        events = result.of_type(EmitEvent)
        assert [(e.type, e.reason) for e in events] == [
            ("Warning", Reason.CHECKPOINT_FAILURES_EXCEEDED)]
        assert "restart 1 of at most 5 in 10s" in events[0].message


class TestLostDrivers:
    """A driver that is lost, deleted or gone ends its attempt; other attempts' drivers stop."""

    def test_a_lost_node_fences_the_old_attempt_and_starts_a_new_one_without_waiting_for_it(
        self,
    ) -> None:
        lost = driver(1, "Unknown")
        first = run(observe(make_job(), status(Phase.RUNNING), lost), at(100))
        assert DeleteDriver(name="clicks-attempt-1", reason=Reason.NODE_LOST,
                            force=True) in first.actions
        assert first.status.last_failure is not None
        assert first.status.last_failure.reason == Reason.NODE_LOST
        assert first.status.phase is Phase.RESTARTING
        second = run(observe(make_job(), first.status, lost), at(111))
        assert second.of_type(AdvanceFence) == [AdvanceFence(attempt=2)]
        assert second.of_type(CreateDriver)[0].attempt == 2

    def test_a_driver_still_running_on_a_node_that_stopped_reporting_is_replaced_at_once(
        self,
    ) -> None:
        """The pod says Running for minutes after its node went silent (the cluster
        evicts it only when its tolerations run out): the node's word is enough."""
        lost = dataclasses.replace(driver(1), node_lost_since=at(90))
        first = run(observe(make_job(), status(Phase.RUNNING), lost), at(100))
        assert DeleteDriver(name="clicks-attempt-1", reason=Reason.NODE_LOST,
                            force=True) in first.actions
        assert first.status.last_failure is not None
        assert first.status.last_failure.reason == Reason.NODE_LOST
        assert "stopped reporting" in first.status.last_failure.message
        second = run(observe(make_job(), first.status, lost), at(111))
        assert second.of_type(AdvanceFence) == [AdvanceFence(attempt=2)]
        assert second.of_type(CreateDriver)[0].attempt == 2

    def test_a_driver_on_a_lost_node_that_is_already_terminating_is_deleted_at_once(
        self,
    ) -> None:
        """Evicted after its tolerations, it would stay Terminating until the node
        came back: no kubelet is left to finish a graceful deletion."""
        lost = dataclasses.replace(driver(1, deleting=at(95)), node_lost_since=at(90))
        first = run(observe(make_job(), status(Phase.RUNNING), lost), at(100))
        assert DeleteDriver(name="clicks-attempt-1", reason=Reason.NODE_LOST,
                            force=True) in first.actions

    def test_a_driver_pod_deleted_by_someone_else_is_restarted(self) -> None:
        deleting = driver(1, deleting=at(130))
        first = run(observe(make_job(), status(Phase.RUNNING), deleting), at(100))
        assert first.status.last_failure is not None
        assert first.status.last_failure.reason == Reason.DRIVER_POD_DELETED
        assert not first.of_type(DeleteDriver)
        # The backoff is over but the old driver is still stopping: wait for it.
        waiting = run(observe(make_job(), first.status, deleting), at(120))
        assert not waiting.of_type(CreateDriver)
        assert waiting.requeue_after == 5
        # Long past its deletion deadline it no longer blocks (its node is probably gone).
        stuck = run(observe(make_job(), first.status, deleting), at(160))
        assert stuck.of_type(CreateDriver)[0].attempt == 2

    def test_a_pod_that_vanished_while_running_is_restarted(self) -> None:
        running = status(Phase.RUNNING, running_since=at(5))
        result = run(observe(make_job(), running), at(200))
        assert result.status.phase is Phase.RESTARTING
        assert result.status.last_failure is not None
        assert result.status.last_failure.reason == Reason.DRIVER_POD_MISSING

    def test_drivers_of_older_attempts_are_stopped_and_old_finished_pods_pruned(self) -> None:
        pods = [
            driver(1, "Failed", exit_code=1),
            driver(2, "Failed", exit_code=1),
            driver(3, "Running"),
            driver(4, "Failed", exit_code=1),
            driver(5, "Running"),
        ]
        result = run(observe(make_job(), status(Phase.RUNNING, 5), *pods), at(100))
        deleted = {(a.name, a.reason) for a in result.of_type(DeleteDriver)}
        assert deleted == {
            ("clicks-attempt-1", Reason.PRUNED_HISTORY),
            ("clicks-attempt-2", Reason.PRUNED_HISTORY),
            ("clicks-attempt-3", Reason.STALE_ATTEMPT),
        }
