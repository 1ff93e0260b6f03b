"""plan(): what the operator does for every phase of a job and every thing it observes."""

from __future__ import annotations

import pytest
from cjob_operator.actions import (
    AdvanceFence,
    CreateCleanupPod,
    CreateDriver,
    DeleteCheckpointStore,
    DeleteCleanupPod,
    DeleteDriver,
    EmitEvent,
    RemoveFinalizer,
    RequestCheckpoint,
)
from cjob_operator.observed import CleanupPod, StoreView
from cjob_operator.plan import plan_invalid_spec
from operator_world import (
    IMAGE,
    T0,
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

from cjob_spec import ConditionStatus, JobStatus, Phase, SpecError

# --- first start ---------------------------------------------------------------------


def test_a_new_job_gets_its_store_rbac_service_fence_and_first_driver_in_that_order() -> None:
    result = run(observe(make_job(), JobStatus(), store=StoreView(exists=False)), T0)
    assert kinds(result) == [
        "EnsureCheckpointConfigMap",
        "EnsureServiceAccount",
        "EnsureRole",
        "EnsureRoleBinding",
        "EnsureService",
        "EnsureSparkAuthSecret",
        "EnsureNetworkPolicy",
        "AdvanceFence",
        "CreateDriver",
        "EmitEvent",
        "RequeueAfter",
    ]
    assert result.of_type(AdvanceFence) == [AdvanceFence(attempt=1)]
    assert result.of_type(CreateDriver) == [
        CreateDriver(
            name="clicks-attempt-1", attempt=1, restore_pointer="latest", image=IMAGE
        )
    ]
    new = result.status
    assert (new.phase, new.attempt, new.restarts) == (Phase.PENDING, 1, 0)
    assert new.driver_pod == "clicks-attempt-1"
    assert new.started_at == T0
    assert new.observed_generation == 1
    assert new.restored_from is None
    assert reasons(result) == ["Started"]


def test_a_local_mode_job_needs_no_driver_service() -> None:
    job = make_job(**{"spark.master": "local[2]"})
    result = run(observe(job, JobStatus()), T0)
    assert "EnsureService" not in kinds(result)
    assert "CreateDriver" in kinds(result)


def test_file_checkpoints_the_next_pod_cannot_read_are_reported_at_each_start() -> None:
    job = make_job(checkpoint={"storage": "file:///ckpt"})
    result = run(observe(job, JobStatus()), T0)
    assert "CreateDriver" in kinds(result)
    warnings = [e for e in result.of_type(EmitEvent) if e.reason == "CheckpointsNotPersistent"]
    assert len(warnings) == 1 and warnings[0].type == "Warning"
    assert "file:///ckpt" in warnings[0].message


def test_file_checkpoints_on_a_persistent_volume_raise_no_warning() -> None:
    job = make_job(checkpoint={"storage": "file:///ckpt/jobs"}, pod={
        "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "c"}}],
        "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}]})
    result = run(observe(job, JobStatus()), T0)
    assert "CreateDriver" in kinds(result)
    assert "CheckpointsNotPersistent" not in reasons(result)


def test_an_existing_store_is_not_recreated() -> None:
    result = run(observe(make_job(), JobStatus(), store=StoreView(exists=True)), T0)
    assert "EnsureCheckpointConfigMap" not in kinds(result)


@pytest.mark.parametrize(
    ("restore_from", "pointer", "origin"),
    [
        (12, "12", "checkpoint 12"),
        (
            "s3://old/j-u/chk-9/_metadata",
            "s3://old/j-u/chk-9/_metadata",
            "s3://old/j-u/chk-9/_metadata",
        ),
    ],
)
def test_a_fresh_start_asks_the_driver_for_what_the_spec_names(
    restore_from: object, pointer: str, origin: str
) -> None:
    job = make_job(**{"restore.from": restore_from})
    result = run(observe(job, JobStatus()), T0)
    assert result.of_type(CreateDriver)[0].restore_pointer == pointer
    assert result.status.message is not None and result.status.message.endswith(origin)
    assert result.status.restored_from is None, "set only once the driver reports"


def test_a_store_that_already_holds_checkpoints_wins_over_the_spec() -> None:
    job = make_job(**{"restore.from": 12})
    store = StoreView(exists=True, latest=checkpoint(40, at(-60)), fence_attempt=0)
    result = run(observe(job, JobStatus(), store=store), T0)
    assert result.of_type(CreateDriver)[0].restore_pointer == "latest"
    assert result.status.message is not None and result.status.message.endswith("checkpoint 40")
    assert result.status.restored_from is None, "set only once the driver reports"


def test_a_job_created_suspended_does_not_start() -> None:
    result = run(observe(make_job(suspend=True), JobStatus()), T0)
    assert "CreateDriver" not in kinds(result)
    assert result.status.phase is Phase.SUSPENDED
    assert reasons(result) == ["Suspended"]


def test_attempt_numbers_never_go_back_even_if_status_was_lost() -> None:
    old = driver(6, "Failed", exit_code=1)
    result = run(
        observe(make_job(), JobStatus(), old, store=StoreView(exists=True, fence_attempt=7)), T0
    )
    assert result.of_type(CreateDriver)[0].attempt == 8
    assert result.of_type(AdvanceFence) == [AdvanceFence(attempt=8)]


# --- pending -------------------------------------------------------------------------


def test_a_driver_just_created_but_not_yet_seen_is_waited_for() -> None:
    result = run(observe(make_job(), status(Phase.PENDING)), at(10))
    assert kinds(result) == ["RequeueAfter"]
    assert result.requeue_after == 20
    assert result.status.phase is Phase.PENDING


def test_a_driver_that_never_appears_counts_as_a_failure() -> None:
    result = run(observe(make_job(), status(Phase.PENDING)), at(31))
    new = result.status
    assert new.phase is Phase.RESTARTING
    assert new.last_failure is not None and new.last_failure.reason == "DriverPodMissing"
    assert new.restarts == 1
    assert new.next_restart_at == at(41)


def test_a_pending_driver_reports_why_it_waits() -> None:
    pod = driver(1, "Pending", reason="ImagePullBackOff", message="back-off pulling image")
    result = run(observe(make_job(), status(Phase.PENDING), pod), at(60))
    new = result.status
    assert new.phase is Phase.PENDING
    assert new.reason == "ImagePullBackOff"
    assert "back-off pulling image" in (new.message or "")
    assert result.requeue_after == 60  # resync comes before the start timeout (5m)
    assert "DeleteDriver" not in kinds(result)


def test_a_driver_that_does_not_start_in_time_is_replaced() -> None:
    pod = driver(1, "Pending", reason="ImagePullBackOff")
    result = run(observe(make_job(), status(Phase.PENDING), pod), at(300))
    assert DeleteDriver(name="clicks-attempt-1", reason="StartTimeout") in result.actions
    new = result.status
    assert new.phase is Phase.RESTARTING
    assert new.last_failure is not None
    assert new.last_failure.reason == "StartTimeout"
    assert "did not start within 5m (ImagePullBackOff)" in new.last_failure.message


# --- running -------------------------------------------------------------------------


def test_a_running_driver_makes_the_job_running_and_ready() -> None:
    result = run(observe(make_job(), status(Phase.PENDING), driver(1)), at(10))
    new = result.status
    assert new.phase is Phase.RUNNING
    assert new.running_since == at(5)
    ready = new.condition("Ready")
    assert ready is not None and ready.status is ConditionStatus.TRUE
    assert reasons(result) == ["Running"]
    assert not result.of_type(CreateDriver) and not result.of_type(DeleteDriver)


def test_a_steady_running_job_emits_no_events_and_keeps_condition_times() -> None:
    first = run(observe(make_job(), status(Phase.PENDING), driver(1)), at(10))
    second = run(observe(make_job(), first.status, driver(1)), at(70))
    assert reasons(second) == []
    assert [a for a in second.actions if type(a).__name__ != "RequeueAfter"] == []
    assert second.status.conditions == first.status.conditions


def test_a_running_job_is_looked_at_again_within_the_resync_period() -> None:
    result = run(observe(make_job(), status(Phase.RUNNING), driver(1)), at(10))
    assert result.requeue_after is not None and 0 < result.requeue_after <= 60


def test_a_healthy_attempt_resets_the_restart_count() -> None:
    running = status(Phase.RUNNING, 3, restarts=2)
    pod = driver(3, started=at(0))
    early = run(observe(make_job(), running, pod), at(599))
    assert early.status.restarts == 2
    late = run(observe(make_job(), running, pod), at(600))
    assert late.status.restarts == 0
    assert reasons(late) == ["RestartCountReset"]


def test_a_new_trigger_nonce_requests_one_checkpoint() -> None:
    job = make_job(**{"checkpoint.triggerNonce": "now-1"})
    result = run(observe(job, status(Phase.RUNNING, job=job), driver(1, job=job)), at(10))
    assert result.of_type(RequestCheckpoint) == [
        RequestCheckpoint(pod="clicks-attempt-1", nonce="now-1")
    ]
    assert result.status.last_trigger_nonce == "now-1"
    again = run(observe(job, result.status, driver(1, job=job)), at(20))
    assert again.of_type(RequestCheckpoint) == []


def test_a_trigger_nonce_waits_until_the_driver_runs() -> None:
    job = make_job(**{"checkpoint.triggerNonce": "now-1"})
    result = run(
        observe(job, status(Phase.PENDING, job=job), driver(1, "Pending", job=job)), at(10)
    )
    assert result.of_type(RequestCheckpoint) == []
    assert result.status.last_trigger_nonce is None


def test_changing_the_trigger_nonce_does_not_restart_the_job() -> None:
    old = make_job()
    new = make_job(**{"checkpoint.triggerNonce": "n2"})
    result = run(observe(new, status(Phase.RUNNING, job=old), driver(1, job=old)), at(10))
    assert not result.of_type(DeleteDriver)
    assert result.status.phase is Phase.RUNNING


# --- ends of attempts ----------------------------------------------------------------


def test_a_driver_that_exits_zero_finishes_the_job() -> None:
    result = run(observe(make_job(), status(Phase.RUNNING), driver(1, "Succeeded")), at(100))
    assert result.status.phase is Phase.SUCCEEDED
    assert reasons(result) == ["Succeeded"]
    assert result.requeue_after is None
    assert not result.of_type(CreateDriver)


def test_always_restarts_a_driver_that_exits_zero() -> None:
    job = make_job(**{"restartPolicy.type": "Always"})
    result = run(
        observe(job, status(Phase.RUNNING, job=job), driver(1, "Succeeded", job=job)), at(66)
    )
    assert result.status.phase is Phase.RESTARTING
    assert result.status.last_failure is None


def test_a_failed_driver_is_restarted_after_backoff_from_the_latest_checkpoint() -> None:
    pod = driver(1, "Failed", exit_code=1, finished=at(65))
    store = StoreView(exists=True, latest=checkpoint(7, at(60)), fence_attempt=1)
    failing = run(observe(make_job(), status(Phase.RUNNING), pod, store=store), at(66))
    new = failing.status
    assert new.phase is Phase.RESTARTING
    assert new.reason == "BackingOff"
    assert (new.restarts, new.next_restart_at) == (1, at(75))
    assert new.last_failure is not None
    assert (new.last_failure.reason, new.last_failure.exit_code) == ("DriverFailed", 1)
    assert new.last_failure.attempt == 1
    assert failing.requeue_after == 9
    assert not failing.of_type(CreateDriver)
    assert reasons(failing) == ["DriverFailed"]

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
    assert reasons(restarted) == ["Restarted"]


def test_consecutive_failures_back_off_exponentially() -> None:
    delays = []
    job_status = status(Phase.RUNNING)
    for attempt in range(1, 5):
        pod = driver(attempt, "Failed", exit_code=1, created=at(0), started=at(1), finished=at(2))
        job_status = job_status.replace(attempt=attempt, driver_pod=pod.name, phase=Phase.RUNNING)
        result = run(observe(make_job(), job_status, pod), at(2))
        assert result.status.next_restart_at is not None
        delays.append((result.status.next_restart_at - at(2)).total_seconds())
        job_status = result.status
    assert delays == [10, 20, 40, 80]


def test_a_failure_noticed_after_its_backoff_restarts_in_the_same_pass() -> None:
    pod = driver(1, "Failed", exit_code=1, finished=at(65))
    result = run(observe(make_job(), status(Phase.RUNNING), pod), at(200))
    assert result.of_type(CreateDriver)[0].attempt == 2
    assert reasons(result) == ["DriverFailed", "Restarted"]
    assert result.status.last_failure is not None


def test_a_backoff_of_zero_restarts_in_the_same_pass() -> None:
    job = make_job(**{"restartPolicy.backoff": {"initial": "0s", "max": "0s"}})
    pod = driver(1, "Failed", exit_code=1, job=job)
    result = run(observe(job, status(Phase.RUNNING, job=job), pod), at(100))
    assert result.of_type(CreateDriver)[0].attempt == 2
    assert result.status.restarts == 1


@pytest.mark.parametrize(
    ("exit_code", "reason"),
    [(2, "InvalidConfiguration"), (3, "UserCodeError"), (6, "RestoreFailed")],
)
def test_permanent_failures_fail_the_job_at_once(exit_code: int, reason: str) -> None:
    pod = driver(1, "Failed", exit_code=exit_code)
    result = run(observe(make_job(), status(Phase.RUNNING), pod), at(100))
    new = result.status
    assert (new.phase, new.reason) == (Phase.FAILED, reason)
    assert new.last_failure is not None and new.last_failure.exit_code == exit_code
    failed = new.condition("Failed")
    assert failed is not None and failed.status is ConditionStatus.TRUE and failed.reason == reason
    assert result.requeue_after is None
    assert not result.of_type(CreateDriver)


def test_the_job_fails_once_max_restarts_are_spent() -> None:
    pod = driver(6, "Failed", exit_code=1)
    result = run(observe(make_job(), status(Phase.RUNNING, 6, restarts=5), pod), at(100))
    assert (result.status.phase, result.status.reason) == (Phase.FAILED, "RestartLimitExceeded")
    assert reasons(result) == ["RestartLimitExceeded"]


def test_never_fails_the_job_on_the_first_failure() -> None:
    job = make_job(**{"restartPolicy.type": "Never"})
    pod = driver(1, "Failed", exit_code=137, reason="OOMKilled", job=job)
    result = run(observe(job, status(Phase.RUNNING, job=job), pod), at(100))
    assert (result.status.phase, result.status.reason) == (Phase.FAILED, "OOMKilled")


def test_a_failure_after_a_long_healthy_run_starts_the_backoff_over() -> None:
    pod = driver(4, "Failed", exit_code=1, started=at(0), finished=at(3600))
    result = run(observe(make_job(), status(Phase.RUNNING, 4, restarts=4), pod), at(3600))
    assert result.status.restarts == 1
    assert result.status.next_restart_at == at(3610)


@pytest.mark.parametrize(
    ("pod_reason", "exit_code", "expected"),
    [
        ("OOMKilled", 137, "OOMKilled"),
        ("Evicted", None, "Evicted"),
        ("Error", 137, "Killed"),
        ("Error", 5, "StorageUnreachable"),
    ],
)
def test_the_failure_reason_is_the_most_telling_one(
    pod_reason: str, exit_code: int | None, expected: str
) -> None:
    pod = driver(1, "Failed", exit_code=exit_code, reason=pod_reason)
    result = run(observe(make_job(), status(Phase.RUNNING), pod), at(66))
    assert result.status.last_failure is not None
    assert result.status.last_failure.reason == expected
    assert result.status.phase is Phase.RESTARTING


# --- lost drivers --------------------------------------------------------------------


def test_a_lost_node_fences_the_old_attempt_and_starts_a_new_one_without_waiting_for_it() -> None:
    lost = driver(1, "Unknown")
    first = run(observe(make_job(), status(Phase.RUNNING), lost), at(100))
    assert DeleteDriver(name="clicks-attempt-1", reason="NodeLost", force=True) in first.actions
    assert first.status.last_failure is not None
    assert first.status.last_failure.reason == "NodeLost"
    assert first.status.phase is Phase.RESTARTING
    second = run(observe(make_job(), first.status, lost), at(111))
    assert second.of_type(AdvanceFence) == [AdvanceFence(attempt=2)]
    assert second.of_type(CreateDriver)[0].attempt == 2


def test_a_driver_pod_deleted_by_someone_else_is_restarted() -> None:
    deleting = driver(1, deleting=at(130))
    first = run(observe(make_job(), status(Phase.RUNNING), deleting), at(100))
    assert first.status.last_failure is not None
    assert first.status.last_failure.reason == "DriverPodDeleted"
    assert not first.of_type(DeleteDriver)
    # The backoff is over but the old driver is still stopping: wait for it.
    waiting = run(observe(make_job(), first.status, deleting), at(120))
    assert not waiting.of_type(CreateDriver)
    assert waiting.requeue_after == 5
    # Long past its deletion deadline it no longer blocks (its node is probably gone).
    stuck = run(observe(make_job(), first.status, deleting), at(160))
    assert stuck.of_type(CreateDriver)[0].attempt == 2


def test_a_pod_that_vanished_while_running_is_restarted() -> None:
    running = status(Phase.RUNNING, running_since=at(5))
    result = run(observe(make_job(), running), at(200))
    assert result.status.phase is Phase.RESTARTING
    assert result.status.last_failure is not None
    assert result.status.last_failure.reason == "DriverPodMissing"


def test_drivers_of_older_attempts_are_stopped_and_old_finished_pods_pruned() -> None:
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
        ("clicks-attempt-1", "PrunedHistory"),
        ("clicks-attempt-2", "PrunedHistory"),
        ("clicks-attempt-3", "StaleAttempt"),
    }


# --- upgrades ------------------------------------------------------------------------


def test_a_spec_change_stops_the_attempt_and_restarts_from_the_latest_checkpoint() -> None:
    old = make_job()
    new = make_job(image="example.org/clicks:2.0")
    running = status(Phase.RUNNING, 3, job=old, restarts=1)
    pod = driver(3, job=old)
    store = StoreView(exists=True, latest=checkpoint(9, at(50)), fence_attempt=3)
    stopping = run(observe(new, running, pod, store=store), at(60))
    assert stopping.of_type(DeleteDriver) == [
        DeleteDriver(name="clicks-attempt-3", reason="SpecChanged")
    ]
    assert not stopping.of_type(CreateDriver)
    assert (stopping.status.phase, stopping.status.reason) == (Phase.RESTARTING, "Upgrading")
    assert reasons(stopping) == ["Upgrading"]

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
    assert reasons(started) == ["Upgraded"]


def test_a_spec_change_while_pending_replaces_the_pending_driver() -> None:
    old = make_job()
    new = make_job(parallelism=1)
    result = run(observe(new, status(Phase.PENDING, job=old), driver(1, "Pending", job=old)), at(5))
    assert result.of_type(DeleteDriver) == [
        DeleteDriver(name="clicks-attempt-1", reason="SpecChanged")
    ]


def test_a_spec_change_during_backoff_is_simply_used_by_the_next_attempt() -> None:
    old = make_job()
    new = make_job(image="example.org/clicks:2.0")
    backing_off = status(Phase.RESTARTING, 1, job=old, next_restart_at=at(100))
    result = run(observe(new, backing_off, driver(1, "Failed", exit_code=1, job=old)), at(50))
    assert not result.of_type(CreateDriver) and not result.of_type(DeleteDriver)


def test_fixing_the_spec_of_a_failed_job_retries_it_with_a_fresh_budget() -> None:
    old = make_job()
    fixed = make_job(image="example.org/clicks:1.1")
    failed = status(Phase.FAILED, 6, job=old, restarts=5, reason="RestartLimitExceeded")
    result = run(observe(fixed, failed, driver(6, "Failed", exit_code=1, job=old)), at(50))
    assert result.of_type(CreateDriver)[0].attempt == 7
    assert result.status.restarts == 0
    assert reasons(result) == ["Retrying"]


def test_a_failed_job_with_an_unchanged_spec_stays_failed() -> None:
    failed = status(Phase.FAILED, 2, reason="UserCodeError")
    result = run(observe(make_job(), failed, driver(2, "Failed", exit_code=3)), at(50))
    assert result.actions == ()
    assert result.status.phase is Phase.FAILED


def test_a_succeeded_job_is_left_alone() -> None:
    done = status(Phase.SUCCEEDED, 1)
    result = run(observe(make_job(image="other:1"), done, driver(1, "Succeeded")), at(50))
    assert result.actions == ()


# --- suspend and resume --------------------------------------------------------------


def test_suspending_a_running_job_takes_a_final_checkpoint_then_stops_the_driver() -> None:
    job = make_job(suspend=True)
    pod = driver(2, job=job)
    store = StoreView(exists=True, latest=checkpoint(4, at(90)), fence_attempt=2)
    running = status(Phase.RUNNING, 2, job=job, running_since=at(5))

    asking = run(observe(job, running, pod, store=store), at(100))
    assert asking.of_type(RequestCheckpoint) == [
        RequestCheckpoint(pod="clicks-attempt-2", nonce="suspend-2")
    ]
    assert not asking.of_type(DeleteDriver)
    assert (asking.status.phase, asking.status.reason) == (Phase.RUNNING, "Suspending")
    progressing = asking.status.condition("Progressing")
    assert progressing is not None and progressing.status is ConditionStatus.TRUE
    assert asking.requeue_after == 5

    waiting = run(observe(job, asking.status, pod, store=store), at(105))
    assert not waiting.of_type(DeleteDriver) and not waiting.of_type(RequestCheckpoint)

    final = StoreView(exists=True, latest=checkpoint(5, at(106)), fence_attempt=2)
    done = run(observe(job, waiting.status, pod, store=final), at(107))
    assert done.of_type(DeleteDriver) == [DeleteDriver(name="clicks-attempt-2", reason="Suspended")]
    assert done.status.phase is Phase.SUSPENDED
    assert "final checkpoint 5" in (done.status.message or "")
    assert done.status.latest_checkpoint is not None and done.status.latest_checkpoint.id == 5


def test_suspending_gives_up_on_the_final_checkpoint_after_the_checkpoint_timeout() -> None:
    job = make_job(suspend=True, **{"checkpoint.timeout": "1m"})
    pod = driver(1, job=job)
    asked = status(Phase.RUNNING, 1, job=job, reason="Suspending", suspend_requested_at=at(100))
    store = StoreView(exists=True, latest=checkpoint(4, at(90)), fence_attempt=1)
    result = run(observe(job, asked, pod, store=store), at(160))
    assert result.of_type(DeleteDriver) == [
        DeleteDriver(name="clicks-attempt-1", reason="Suspended")
    ]
    assert result.status.phase is Phase.SUSPENDED
    assert "resuming restores checkpoint 4" in (result.status.message or "")


@pytest.mark.parametrize("phase", ["Pending", "Unknown"])
def test_suspending_a_driver_that_is_not_running_stops_it_at_once(phase: str) -> None:
    job = make_job(suspend=True)
    result = run(observe(job, status(Phase.PENDING, job=job), driver(1, phase, job=job)), at(10))
    assert [a.name for a in result.of_type(DeleteDriver)] == ["clicks-attempt-1"]
    assert result.status.phase is Phase.SUSPENDED
    assert not result.of_type(RequestCheckpoint)


def test_suspending_during_backoff_cancels_the_restart() -> None:
    job = make_job(suspend=True)
    backing_off = status(Phase.RESTARTING, 1, job=job, next_restart_at=at(100))
    result = run(observe(job, backing_off, driver(1, "Failed", exit_code=1, job=job)), at(50))
    assert result.status.phase is Phase.SUSPENDED
    assert result.status.next_restart_at is None
    assert not result.of_type(CreateDriver)


def test_a_driver_that_crashes_while_suspending_is_not_restarted() -> None:
    job = make_job(suspend=True)
    asked = status(Phase.RUNNING, 1, job=job, reason="Suspending", suspend_requested_at=at(100))
    pod = driver(1, "Failed", exit_code=1, job=job)
    result = run(observe(job, asked, pod), at(101))
    assert result.status.phase is Phase.SUSPENDED
    assert result.status.last_failure is not None
    assert not result.of_type(CreateDriver)


def test_a_suspended_job_resumes_from_its_latest_checkpoint_with_a_fresh_budget() -> None:
    job = make_job()
    suspended = status(Phase.SUSPENDED, 2, job=job, restarts=3)
    store = StoreView(exists=True, latest=checkpoint(5, at(106)), fence_attempt=2)
    result = run(
        observe(job, suspended, driver(2, "Failed", exit_code=143, job=job), store=store), at(200)
    )
    assert result.of_type(CreateDriver) == [
        CreateDriver(
            name="clicks-attempt-3", attempt=3, restore_pointer="latest", image=IMAGE
        )
    ]
    assert result.status.restarts == 0
    assert reasons(result) == ["Resumed"]


def test_resuming_waits_for_the_suspended_driver_to_stop() -> None:
    job = make_job()
    suspended = status(Phase.SUSPENDED, 2, job=job)
    stopping = driver(2, job=job, deleting=at(230))
    result = run(observe(job, suspended, stopping), at(200))
    assert not result.of_type(CreateDriver)
    assert result.status.phase is Phase.SUSPENDED


def test_a_suspended_job_keeps_no_driver_running() -> None:
    job = make_job(suspend=True)
    result = run(observe(job, status(Phase.SUSPENDED, 2, job=job), driver(2, job=job)), at(200))
    assert result.of_type(DeleteDriver) == [
        DeleteDriver(name="clicks-attempt-2", reason="Suspended")
    ]


def test_suspending_a_failed_job_then_resuming_retries_it() -> None:
    failed = status(Phase.FAILED, 2, reason="UserCodeError")
    suspended = run(observe(make_job(suspend=True), failed), at(10))
    assert suspended.status.phase is Phase.SUSPENDED
    resumed = run(observe(make_job(), suspended.status), at(20))
    assert resumed.of_type(CreateDriver)[0].attempt == 3


# --- deletion ------------------------------------------------------------------------


def test_deleting_a_job_stops_its_driver_before_letting_go() -> None:
    result = run(observe(make_job(), status(Phase.RUNNING), driver(1), deleting=True), at(10))
    assert result.of_type(DeleteDriver) == [
        DeleteDriver(name="clicks-attempt-1", reason="JobDeleted")
    ]
    assert not result.of_type(RemoveFinalizer)
    assert result.requeue_after == 5
    gone = run(observe(make_job(), result.status, deleting=True), at(20))
    assert kinds(gone) == ["RemoveFinalizer"]


DELETE = {"cleanupPolicy.checkpoints": "Delete"}
JOB_DIR = "s3://ckpt/jobs/clicks-uid-1"


def cleanup_pod(phase: str, *, created: float = 20, **fields: object) -> CleanupPod:
    return CleanupPod(name="clicks-cleanup", phase=phase, created_at=at(created),
                      **fields)  # type: ignore[arg-type]


def deleting(now: float, pod: CleanupPod | None = None, **spec: object):  # type: ignore[no-untyped-def]
    job = make_job(**{**DELETE, **spec})
    return run(observe(job, status(Phase.SUCCEEDED, job=job), deleting=True, cleanup_pod=pod),
               at(now))


def test_deleting_a_job_with_cleanup_delete_starts_a_cleanup_pod_for_its_directory() -> None:
    result = deleting(20)
    assert result.of_type(CreateCleanupPod) == [
        CreateCleanupPod(name="clicks-cleanup", uri=JOB_DIR, image=IMAGE,
                         deadline_seconds=600)
    ]
    assert not result.of_type(RemoveFinalizer)
    assert not result.of_type(DeleteCheckpointStore), "the pointers stay until the data is gone"
    assert reasons(result) == ["DeletingCheckpoints"]
    assert result.requeue_after == 5
    again = run(observe(make_job(**DELETE), result.status, deleting=True), at(25))
    assert again.of_type(CreateCleanupPod), "a pod the index has yet to show is asked for again"
    assert reasons(again) == [], "but announced once"


def test_a_job_without_its_own_image_cleans_up_with_the_operators_runtime_image() -> None:
    job = make_job(**DELETE, image=None)
    result = run(observe(job, status(Phase.SUCCEEDED, job=job), deleting=True,
                         default_image="runtime:1"), at(20))
    assert result.of_type(CreateCleanupPod)[0].image == "runtime:1"


def test_the_job_waits_while_its_cleanup_pod_runs() -> None:
    result = deleting(60, cleanup_pod("Running"))
    assert kinds(result) == ["RequeueAfter"]
    assert result.status.reason == "DeletingCheckpoints"
    assert "clicks-cleanup" in (result.status.message or "")


def test_a_succeeded_cleanup_deletes_the_store_then_lets_the_job_go() -> None:
    result = deleting(60, cleanup_pod("Succeeded", exit_code=0, message="deleted 7 files"))
    assert kinds(result) == ["DeleteCheckpointStore", "EmitEvent", "RemoveFinalizer"]
    assert result.of_type(DeleteCheckpointStore) == [
        DeleteCheckpointStore(name="clicks-checkpoints")]
    (event,) = result.of_type(EmitEvent)
    assert (event.type, event.reason) == ("Normal", "CheckpointsDeleted")
    assert JOB_DIR in event.message and "deleted 7 files" in event.message


@pytest.mark.parametrize(
    ("pod", "now", "expected"),
    [
        (cleanup_pod("Failed", exit_code=7, message="checkpoint data kept: access denied"), 60,
         "failed, exit code 7 (the checkpoint data could not be deleted): checkpoint data "
         "kept: access denied"),
        (cleanup_pod("Failed", exit_code=137, reason="DeadlineExceeded"), 700,
         "failed, exit code 137"),
        (cleanup_pod("Unknown"), 60, "stopped reporting"),
        (cleanup_pod("Running", deletion_timestamp=at(50)), 60, "was deleted before it finished"),
    ],
    ids=["failed", "deadline-killed", "node-lost", "deleted"],
)
def test_a_cleanup_that_cannot_succeed_keeps_the_data_says_why_and_lets_the_job_go(
    pod: CleanupPod, now: float, expected: str
) -> None:
    result = deleting(now, pod)
    assert kinds(result)[-1] == "RemoveFinalizer"
    assert not result.of_type(DeleteCheckpointStore)
    (event,) = result.of_type(EmitEvent)
    assert (event.type, event.reason) == ("Warning", "CheckpointsRetained")
    assert JOB_DIR in event.message and expected in event.message
    assert not result.of_type(DeleteCleanupPod)


def test_a_cleanup_pod_past_its_deadline_is_stopped_and_the_data_reported_kept() -> None:
    stuck = cleanup_pod("Pending", reason="ImagePullBackOff")
    waiting = deleting(20 + 600 + 29, stuck)
    assert not waiting.of_type(RemoveFinalizer)
    assert waiting.requeue_after == 1, "looked at again when the deadline passes"
    result = deleting(20 + 600 + 30, stuck)
    assert result.of_type(DeleteCleanupPod) == [DeleteCleanupPod(name="clicks-cleanup")]
    assert kinds(result)[-1] == "RemoveFinalizer"
    (event,) = result.of_type(EmitEvent)
    assert event.reason == "CheckpointsRetained"
    assert "did not finish within 600s (ImagePullBackOff)" in event.message


def test_without_any_image_to_run_the_cleanup_the_data_is_kept_and_the_job_goes() -> None:
    result = deleting(20, image=None)
    assert not result.of_type(CreateCleanupPod)
    assert kinds(result)[-1] == "RemoveFinalizer"
    assert reasons(result) == ["CheckpointsRetained"]


def test_checkpoints_are_not_deleted_while_a_driver_may_still_write_them() -> None:
    job = make_job(**DELETE)
    result = run(
        observe(
            job, status(Phase.RUNNING, job=job), driver(1, job=job, deleting=at(15)), deleting=True
        ),
        at(10),
    )
    assert not result.of_type(CreateCleanupPod)
    assert not result.of_type(RemoveFinalizer)


def test_a_job_that_retains_its_checkpoints_starts_no_cleanup_pod() -> None:
    result = run(observe(make_job(), status(Phase.SUCCEEDED), deleting=True), at(20))
    assert kinds(result) == ["RemoveFinalizer"]


def test_a_driver_on_a_lost_node_does_not_hold_up_deletion() -> None:
    result = run(
        observe(make_job(), status(Phase.RUNNING), driver(1, "Unknown"), deleting=True), at(10)
    )
    assert DeleteDriver(name="clicks-attempt-1", reason="JobDeleted", force=True) in result.actions
    assert result.of_type(RemoveFinalizer)


# --- conditions ----------------------------------------------------------------------


def condition(result_status: JobStatus, kind: str) -> tuple[str, str]:
    found = result_status.condition(kind)
    assert found is not None
    return found.status.value, found.reason


def test_checkpointing_is_unknown_until_the_first_checkpoint_of_the_attempt() -> None:
    store = StoreView(exists=True, latest=checkpoint(3, at(-100)), fence_attempt=1)
    result = run(observe(make_job(), status(Phase.RUNNING), driver(1), store=store), at(20))
    assert condition(result.status, "Checkpointing") == ("Unknown", "AwaitingFirstCheckpoint")


def test_checkpointing_is_true_while_checkpoints_complete_in_time() -> None:
    store = StoreView(exists=True, latest=checkpoint(4, at(15)), fence_attempt=1)
    result = run(observe(make_job(), status(Phase.RUNNING), driver(1), store=store), at(20))
    assert condition(result.status, "Checkpointing") == ("True", "CheckpointCompleted")
    assert result.status.latest_checkpoint == checkpoint(4, at(15))


def test_checkpointing_is_false_when_checkpoints_are_overdue() -> None:
    store = StoreView(exists=True, latest=checkpoint(4, at(15)), fence_attempt=1)
    # interval 10s, timeout 10m: overdue after 2 x 10s + 600s
    result = run(observe(make_job(), status(Phase.RUNNING), driver(1), store=store), at(15 + 621))
    assert condition(result.status, "Checkpointing") == ("False", "CheckpointOverdue")


def test_every_pass_sets_the_four_conditions_with_the_observed_generation() -> None:
    job = make_job()
    result = run(observe(job, JobStatus()), T0)
    assert [c.type for c in result.status.conditions] == [
        "Ready",
        "Progressing",
        "Checkpointing",
        "Failed",
    ]
    assert all(c.observed_generation == 1 for c in result.status.conditions)
    assert condition(result.status, "Progressing") == ("True", "Started")


# --- invalid specs -------------------------------------------------------------------


def test_an_invalid_new_job_is_marked_failed() -> None:
    error = SpecError(field="spec.parallelism", problem="must be >= 1, got 0")
    result = plan_invalid_spec(status=JobStatus(), error=error, generation=1, now=T0)
    assert result.status.phase is Phase.FAILED
    assert result.status.reason == "InvalidSpec"
    assert result.status.message == "invalid spec: spec.parallelism: must be >= 1, got 0"
    assert [type(a).__name__ for a in result.actions] == ["EmitEvent"]


def test_an_invalid_update_leaves_the_running_driver_alone() -> None:
    error = SpecError(field="spec.image", problem="must not be empty")
    running = status(Phase.RUNNING, 2)
    result = plan_invalid_spec(status=running, error=error, generation=2, now=T0)
    assert result.status.phase is Phase.RUNNING
    assert not any(isinstance(a, DeleteDriver | CreateDriver) for a in result.actions)
    again = plan_invalid_spec(status=result.status, error=error, generation=2, now=at(5))
    assert again.actions == ()


def test_a_fixed_spec_restarts_a_job_that_was_invalid_from_the_start() -> None:
    error = SpecError(field="spec.image", problem="must not be empty")
    invalid = plan_invalid_spec(status=JobStatus(), error=error, generation=1, now=T0)
    fixed = run(observe(make_job(), invalid.status), at(5))
    assert fixed.of_type(CreateDriver)[0].attempt == 1


def test_events_are_the_only_way_decisions_are_announced() -> None:
    result = run(
        observe(make_job(), status(Phase.RUNNING), driver(1, "Failed", exit_code=4)), at(66)
    )
    events = result.of_type(EmitEvent)
    assert [(e.type, e.reason) for e in events] == [("Warning", "CheckpointFailuresExceeded")]
    assert "restart 1 of at most 5 in 10s" in events[0].message


def test_an_operator_without_network_policies_gives_the_job_none() -> None:
    from cjob_operator.plan import PlanSettings, plan

    observed = observe(make_job(), JobStatus(), store=StoreView(exists=False))
    result = plan(observed, now=T0, settings=PlanSettings(network_policies=False))
    assert "EnsureNetworkPolicy" not in kinds(result)
    assert "CreateDriver" in kinds(result)
