"""plan() for a job being deleted: no driver left, then its checkpoint data deleted by a
cleanup pod, or kept and said so."""

from __future__ import annotations

import pytest
from operator_world import IMAGE, at, driver, kinds, make_job, observe, reasons, run, status

from cjob_lifecycle.actions import (
    CreateCleanupPod,
    DeleteCheckpointStore,
    DeleteCleanupPod,
    DeleteDriver,
    DeleteExecutor,
    EmitEvent,
    RemoveFinalizer,
    RetainCheckpointStore,
)
from cjob_lifecycle.observed import CleanupPod, ExecutorPod
from cjob_lifecycle.plan import Plan
from cjob_spec import Phase, Reason
from cjob_spec.status import JobStatus

DELETE = {"cleanupPolicy.checkpoints": "Delete"}
JOB_DIR = "s3://ckpt/jobs/clicks-uid-1"


def cleanup_pod(phase: str, *, created: float = 20, **fields: object) -> CleanupPod:
    return CleanupPod(name="clicks-cleanup", phase=phase, created_at=at(created),
                      **fields)  # type: ignore[arg-type]


def deleting(now: float, pod: CleanupPod | None = None, *,
             executors: tuple[ExecutorPod, ...] = (), roots: tuple[str, ...] = (),
             **spec: object) -> Plan:
    """A pass over the job being deleted, with ``cleanupPolicy.checkpoints: Delete``."""
    job = make_job(**{**DELETE, **spec})
    return run(observe(job, status(Phase.SUCCEEDED, job=job, storage_roots=roots),
                       deleting=True, cleanup_pod=pod, executors=executors), at(now))


def executor(phase: str = "Running", *, deleted: float | None = None) -> ExecutorPod:
    return ExecutorPod(name="clicks-attempt-1-exec-1", phase=phase,
                       deletion_timestamp=None if deleted is None else at(deleted))


class TestStoppingTheDrivers:
    """The job goes only once no driver can write its data."""

    def test_deleting_a_job_stops_its_driver_before_letting_go(self) -> None:
        result = run(observe(make_job(), status(Phase.RUNNING), driver(1), deleting=True), at(10))
        assert result.of_type(DeleteDriver) == [
            DeleteDriver(name="clicks-attempt-1", reason=Reason.JOB_DELETED)
        ]
        assert not result.of_type(RemoveFinalizer)
        assert result.requeue_after == 5
        gone = run(observe(make_job(), result.status, deleting=True), at(20))
        assert kinds(gone) == ["RemoveFinalizer"]

    def test_a_driver_on_a_lost_node_does_not_hold_up_deletion(self) -> None:
        result = run(
            observe(make_job(), status(Phase.RUNNING), driver(1, "Unknown"), deleting=True), at(10)
        )
        assert DeleteDriver(name="clicks-attempt-1", reason=Reason.JOB_DELETED,
                            force=True) in result.actions
        assert result.of_type(RemoveFinalizer)

    def test_checkpoints_are_not_deleted_while_a_driver_may_still_write_them(self) -> None:
        job = make_job(**DELETE)
        result = run(
            observe(
                job, status(Phase.RUNNING, job=job), driver(1, job=job, deleting=at(15)),
                deleting=True,
            ),
            at(10),
        )
        assert not result.of_type(CreateCleanupPod)
        assert not result.of_type(RemoveFinalizer)

    def test_a_job_that_retains_its_checkpoints_starts_no_cleanup_pod(self) -> None:
        result = run(observe(make_job(), status(Phase.SUCCEEDED), deleting=True), at(20))
        assert kinds(result) == ["RemoveFinalizer"]

    def test_checkpoints_are_not_deleted_while_an_executor_may_still_upload(self) -> None:
        result = deleting(20, executors=(executor(),))
        assert result.of_type(DeleteExecutor) == [DeleteExecutor(name="clicks-attempt-1-exec-1")]
        assert not result.of_type(CreateCleanupPod)
        assert not result.of_type(RemoveFinalizer)
        assert result.requeue_after == 5
        assert "1 executor pod" in (result.status.message or "")

    def test_an_executor_being_deleted_is_waited_for_but_not_deleted_again(self) -> None:
        result = deleting(20, executors=(executor(deleted=15),))
        assert kinds(result) == ["RequeueAfter"]

    def test_an_executor_that_outlives_its_deletion_by_the_kill_grace_no_longer_holds_up(
        self,
    ) -> None:
        result = deleting(15 + 30, executors=(executor(deleted=15),))
        assert result.of_type(CreateCleanupPod)

    @pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Unknown"])
    def test_an_executor_that_ended_or_whose_node_is_gone_does_not_hold_up(
        self, phase: str
    ) -> None:
        result = deleting(20, executors=(executor(phase),))
        assert result.of_type(CreateCleanupPod)
        assert not result.of_type(DeleteExecutor) or phase == "Unknown"

    def test_a_job_that_retains_its_checkpoints_does_not_wait_for_executors(self) -> None:
        result = run(observe(make_job(), status(Phase.SUCCEEDED), deleting=True,
                             executors=(executor(),)), at(20))
        assert kinds(result) == ["RemoveFinalizer"]


class TestTheCleanupPod:
    """With cleanupPolicy Delete, a cleanup pod deletes the job's directory."""

    def test_deleting_a_job_with_cleanup_delete_starts_a_cleanup_pod_for_its_directory(
        self,
    ) -> None:
        result = deleting(20)
        assert result.of_type(CreateCleanupPod) == [
            CreateCleanupPod(name="clicks-cleanup", uris=(JOB_DIR,), image=IMAGE,
                             deadline_seconds=600)
        ]
        assert not result.of_type(RemoveFinalizer)
        assert not result.of_type(DeleteCheckpointStore), "the pointers stay until the data is gone"
        assert reasons(result) == [Reason.DELETING_CHECKPOINTS]
        assert result.requeue_after == 5
        again = run(observe(make_job(**DELETE), result.status, deleting=True), at(25))
        assert again.of_type(CreateCleanupPod), "a pod the index has yet to show is asked for again"
        assert reasons(again) == [], "but announced once"

    def test_a_job_without_its_own_image_cleans_up_with_the_operators_runtime_image(self) -> None:
        job = make_job(**DELETE, image=None)
        result = run(observe(job, status(Phase.SUCCEEDED, job=job), deleting=True,
                             default_image="runtime:1"), at(20))
        assert result.of_type(CreateCleanupPod)[0].image == "runtime:1"

    def test_the_job_waits_while_its_cleanup_pod_runs(self) -> None:
        result = deleting(60, cleanup_pod("Running"))
        assert kinds(result) == ["RequeueAfter"]
        assert result.status.reason == Reason.DELETING_CHECKPOINTS
        assert "clicks-cleanup" in (result.status.message or "")

    def test_a_succeeded_cleanup_deletes_the_store_then_lets_the_job_go(self) -> None:
        result = deleting(60, cleanup_pod("Succeeded", exit_code=0, message="deleted 7 files"))
        assert kinds(result) == ["DeleteCheckpointStore", "EmitEvent", "RemoveFinalizer"]
        assert result.of_type(DeleteCheckpointStore) == [
            DeleteCheckpointStore(name="clicks-checkpoints")]
        (event,) = result.of_type(EmitEvent)
        assert (event.type, event.reason) == ("Normal", Reason.CHECKPOINTS_DELETED)
        assert JOB_DIR in event.message and "deleted 7 files" in event.message


class TestEveryStorageTheJobUsed:
    """A job whose storage changed has checkpoints under every root it used."""

    def test_the_cleanup_pod_deletes_every_root_the_status_records_and_the_current_one(
        self,
    ) -> None:
        old = "s3://old-bucket/ckpt/clicks-uid-1"
        result = deleting(20, roots=(old, JOB_DIR))
        assert result.of_type(CreateCleanupPod)[0].uris == (old, JOB_DIR)
        assert old in (result.status.message or "")

    def test_a_status_from_before_roots_were_recorded_still_gets_the_current_root(self) -> None:
        assert deleting(20).of_type(CreateCleanupPod)[0].uris == (JOB_DIR,)

    def test_starting_an_attempt_records_its_storage_root_once(self) -> None:
        job = make_job()
        first = run(observe(job, JobStatus()), at(0))
        assert first.status.storage_roots == (JOB_DIR,)
        moved = make_job(**{"checkpoint.storage": "s3://other/ckpt"})
        second = run(observe(moved, first.status.replace(phase=Phase.FAILED)), at(10))
        assert second.status.attempt == 2
        assert second.status.storage_roots == (JOB_DIR, "s3://other/ckpt/clicks-uid-1")
        again = run(observe(moved, second.status.replace(phase=Phase.FAILED)), at(20))
        assert again.status.storage_roots == second.status.storage_roots


class TestDataThatIsKept:
    """A cleanup that cannot succeed keeps the data, says where and why, and lets the job go."""

    @pytest.mark.parametrize(
        ("pod", "now", "expected"),
        [
            (cleanup_pod("Failed", exit_code=7, message="checkpoint data kept: access denied"), 60,
             "failed, exit code 7 (the checkpoint data could not be deleted): checkpoint data "
             "kept: access denied"),
            (cleanup_pod("Failed", exit_code=137, reason="DeadlineExceeded"), 700,
             "failed, exit code 137"),
            (cleanup_pod("Unknown"), 60, "stopped reporting"),
            (cleanup_pod("Running", deletion_timestamp=at(50)), 60,
             "was deleted before it finished"),
        ],
        ids=["failed", "deadline-killed", "node-lost", "deleted"],
    )
    def test_a_cleanup_that_cannot_succeed_keeps_the_data_says_why_and_lets_the_job_go(
        self, pod: CleanupPod, now: float, expected: str
    ) -> None:
        result = deleting(now, pod)
        assert kinds(result)[-1] == "RemoveFinalizer"
        assert not result.of_type(DeleteCheckpointStore)
        (event,) = result.of_type(EmitEvent)
        assert (event.type, event.reason) == ("Warning", Reason.CHECKPOINTS_RETAINED)
        assert JOB_DIR in event.message and expected in event.message
        assert not result.of_type(DeleteCleanupPod)

    def test_kept_data_keeps_its_index_the_store_outlives_the_job(self) -> None:
        result = deleting(60, cleanup_pod(
            "Failed", exit_code=7,
            message="checkpoint data kept: 1 files remain under s3://x after the deletion"))
        order = kinds(result)
        assert order[-1] == "RemoveFinalizer"
        assert order.index("RetainCheckpointStore") < order.index("RemoveFinalizer"), \
            "kept before the job goes: the garbage collector would delete it with the job"
        (retain,) = result.of_type(RetainCheckpointStore)
        assert retain.name == "clicks-checkpoints"
        assert "1 files remain" in retain.message
        (event,) = result.of_type(EmitEvent)
        assert "clicks-checkpoints" in event.message, "the Warning says where the index is"

    def test_a_cleanup_pod_past_its_deadline_is_stopped_and_the_data_reported_kept(self) -> None:
        stuck = cleanup_pod("Pending", reason="ImagePullBackOff")
        waiting = deleting(20 + 600 + 29, stuck)
        assert not waiting.of_type(RemoveFinalizer)
        assert waiting.requeue_after == 1, "looked at again when the deadline passes"
        result = deleting(20 + 600 + 30, stuck)
        assert result.of_type(DeleteCleanupPod) == [DeleteCleanupPod(name="clicks-cleanup")]
        assert kinds(result)[-1] == "RemoveFinalizer"
        (event,) = result.of_type(EmitEvent)
        assert event.reason == Reason.CHECKPOINTS_RETAINED
        assert "did not finish within 600s (ImagePullBackOff)" in event.message

    def test_without_any_image_to_run_the_cleanup_the_data_is_kept_and_the_job_goes(self) -> None:
        result = deleting(20, image=None)
        assert not result.of_type(CreateCleanupPod)
        assert kinds(result)[-1] == "RemoveFinalizer"
        assert reasons(result) == [Reason.CHECKPOINTS_RETAINED]
