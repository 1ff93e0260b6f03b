"""``plan_snapshot``: a CheckpointedJobSnapshot waits for its job's checkpoint, copies it
with a pod, tries again only when storage failed, and on deletion stops the copy and
disposes of it (or keeps it and says so)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from cjob_lifecycle.snapshot_actions import (
    CreateSnapshotPod,
    DeleteSnapshotPod,
    EmitSnapshotEvent,
    HoldCheckpoint,
    ReleaseCheckpoint,
    ReleaseSnapshot,
)
from cjob_lifecycle.snapshot_observed import SnapshotJob, SnapshotObserved, SnapshotPod
from cjob_lifecycle.snapshot_plan import MAX_TRIES, plan_snapshot
from cjob_spec.exit_codes import ExitCode
from cjob_spec.snapshot import SnapshotSpec, SnapshotState, SnapshotStatus
from cjob_spec.snapshot_outcome import SnapshotOutcome, SnapshotTask
from cjob_spec.status import CheckpointRef, ConditionStatus

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
STORAGE = "s3://bucket/checkpoints"
JOB_DIR = f"{STORAGE}/sums-j1"
TARGET = f"{STORAGE}/snapshots/keep-s1"
JOB_SPEC = {"job": {"entrypoint": "sums.py"}, "checkpoint": {"storage": STORAGE}}


def observed(*, spec: SnapshotSpec | None = None, status: SnapshotStatus | None = None,
             latest: int | None = 5, retained: tuple[int, ...] | None = None,
             held: int | None = None, job: bool = True, **changes: object) -> SnapshotObserved:
    """The job's store retains checkpoints 1..``latest`` (or ``retained``)."""
    if retained is None:
        retained = tuple(range(1, latest + 1)) if latest is not None else ()
    refs = tuple(CheckpointRef(id=i, path=f"{JOB_DIR}/chk-{i}/_metadata") for i in retained)
    base = SnapshotObserved(
        name="keep", uid="s1", generation=1,
        spec=spec if spec is not None else SnapshotSpec(job_name="sums"),
        status=status if status is not None else SnapshotStatus(),
        job=SnapshotJob(uid="j1", spec=JOB_SPEC, store="sums-checkpoints", checkpoints=refs,
                        held=held) if job else None)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def copying(**changes: object) -> SnapshotStatus:
    status = SnapshotStatus(state=SnapshotState.IN_PROGRESS, job_uid="j1", checkpoint_id=5,
                            source=f"{JOB_DIR}/chk-5/_metadata", target=TARGET,
                            job_spec=JOB_SPEC)
    return status.replace(**changes)


def finished_pod(outcome: SnapshotOutcome | None, *, exit_code: int = 0,
                 name: str = "keep-take", message: str | None = None) -> SnapshotPod:
    return SnapshotPod(name=name, phase="Succeeded" if exit_code == 0 else "Failed",
                       exit_code=exit_code,
                       message=outcome.to_message() if outcome is not None else message)


def events(actions: tuple[object, ...]) -> list[tuple[str, str]]:
    return [(a.type, a.reason) for a in actions if isinstance(a, EmitSnapshotEvent)]


class TestTakingACopy:
    def test_a_snapshot_of_a_missing_job_waits_for_it(self) -> None:
        plan = plan_snapshot(observed(job=False), now=NOW)
        assert plan.actions == ()
        assert plan.status.state is SnapshotState.PENDING
        assert plan.status.reason == "WaitingForJob"
        assert plan.requeue_after is not None

    def test_a_job_without_a_checkpoint_is_waited_for(self) -> None:
        plan = plan_snapshot(observed(latest=None), now=NOW)
        assert plan.status.state is SnapshotState.PENDING
        assert plan.status.reason == "WaitingForCheckpoint"

    def test_a_named_checkpoint_newer_than_the_latest_is_waited_for(self) -> None:
        plan = plan_snapshot(observed(spec=SnapshotSpec(job_name="sums", checkpoint_id=9)),
                             now=NOW)
        assert plan.status.reason == "WaitingForCheckpoint"
        assert "checkpoint 9" in (plan.status.message or "")

    def test_the_latest_checkpoint_is_held_before_anything_is_copied(self) -> None:
        plan = plan_snapshot(observed(), now=NOW)
        assert plan.actions == (HoldCheckpoint(store="sums-checkpoints", checkpoint_id=5,
                                               holder="s1", by="snapshot keep"),)
        assert plan.status.state is SnapshotState.PENDING
        assert plan.status.reason == "HoldingCheckpoint"
        assert plan.requeue_after is not None and plan.requeue_after < 1

    def test_a_held_checkpoint_is_copied_even_when_newer_ones_completed_since(self) -> None:
        plan = plan_snapshot(observed(latest=8, held=5), now=NOW)
        create = plan.actions[0]
        assert isinstance(create, CreateSnapshotPod)
        assert create.checkpoint == f"{JOB_DIR}/chk-5/_metadata"
        assert plan.status.checkpoint_id == 5

    def test_a_hold_refused_because_the_checkpoint_was_pruned_asks_for_the_newest(
            self) -> None:
        plan = plan_snapshot(observed(latest=8, retained=(7, 8), held=None), now=NOW)
        assert [a.checkpoint_id for a in plan.actions if isinstance(a, HoldCheckpoint)] == [8]

    def test_a_named_checkpoint_no_longer_retained_fails_naming_those_that_are(self) -> None:
        plan = plan_snapshot(observed(spec=SnapshotSpec(job_name="sums", checkpoint_id=3),
                                      retained=(6, 7), latest=7), now=NOW)
        assert plan.status.state is SnapshotState.FAILED
        assert plan.status.reason == "CheckpointNotRetained"
        assert "keeps 6, 7" in (plan.status.message or "")

    def test_the_latest_checkpoint_is_copied_beside_the_jobs_directory(self) -> None:
        plan = plan_snapshot(observed(held=5), now=NOW)
        create = plan.actions[0]
        assert create == CreateSnapshotPod(
            name="keep-take", task=SnapshotTask.TAKE, target=TARGET, job_name="sums",
            job_uid="j1", job_spec=JOB_SPEC, checkpoint=f"{JOB_DIR}/chk-5/_metadata")
        assert plan.status.state is SnapshotState.IN_PROGRESS
        assert plan.status.job_spec == JOB_SPEC, "kept to dispose of the copy later"
        assert plan.status.observed_generation == 1

    def test_a_named_older_checkpoint_is_copied_from_its_own_directory(self) -> None:
        plan = plan_snapshot(observed(spec=SnapshotSpec(job_name="sums", checkpoint_id=3),
                                      held=3), now=NOW)
        create = plan.actions[0]
        assert isinstance(create, CreateSnapshotPod)
        assert create.checkpoint == f"{JOB_DIR}/chk-3/_metadata"

    def test_a_running_copy_is_followed_without_actions(self) -> None:
        plan = plan_snapshot(observed(status=copying(),
                                      take_pod=SnapshotPod(name="keep-take", phase="Running")),
                             now=NOW)
        assert plan.actions == ()
        assert plan.requeue_after is not None

    def test_a_finished_copy_completes_the_snapshot_with_its_path_and_size(self) -> None:
        outcome = SnapshotOutcome(task=SnapshotTask.TAKE, path=f"{TARGET}/sums-j1/chk-5/_metadata",
                                  checkpoint_id=5, files=7, size_bytes=3 << 20)
        plan = plan_snapshot(observed(status=copying(), take_pod=finished_pod(outcome), held=5),
                             now=NOW)
        status = plan.status
        assert plan.actions[0] == ReleaseCheckpoint(store="sums-checkpoints", holder="s1")
        assert status.state is SnapshotState.COMPLETED
        assert status.path == outcome.path and status.size_bytes == 3 << 20
        assert status.completed_at == NOW
        ready = status.conditions[0]
        assert (ready.type, ready.status) == ("Ready", ConditionStatus.TRUE)
        assert events(plan.actions) == [("Normal", "SnapshotCompleted")]
        assert "3.0 MiB" in (status.message or "")

    def test_a_completed_snapshot_is_never_taken_again(self) -> None:
        done = copying(state=SnapshotState.COMPLETED, path="x")
        plan = plan_snapshot(observed(status=done, latest=9), now=NOW)
        assert plan.actions == () and plan.status.state is SnapshotState.COMPLETED


class TestFailedCopies:
    def test_unreachable_storage_is_tried_again_by_a_new_pod(self) -> None:
        outcome = SnapshotOutcome(task=SnapshotTask.TAKE, error="storage is down")
        pod = finished_pod(outcome, exit_code=ExitCode.STORAGE_UNREACHABLE)
        plan = plan_snapshot(observed(status=copying(), take_pod=pod), now=NOW)
        assert DeleteSnapshotPod("keep-take") in plan.actions
        assert plan.status.failures == 1 and plan.status.state is SnapshotState.IN_PROGRESS
        assert events(plan.actions) == [("Warning", "SnapshotRetrying")]
        again = plan_snapshot(observed(status=plan.status), now=NOW)
        assert isinstance(again.actions[0], CreateSnapshotPod), "the deleted pod is made anew"

    def test_after_the_last_try_the_snapshot_fails_with_the_storages_words(self) -> None:
        outcome = SnapshotOutcome(task=SnapshotTask.TAKE, error="storage is down")
        pod = finished_pod(outcome, exit_code=ExitCode.STORAGE_UNREACHABLE)
        plan = plan_snapshot(observed(status=copying(failures=MAX_TRIES - 1), take_pod=pod),
                             now=NOW)
        assert plan.status.state is SnapshotState.FAILED
        assert plan.status.message == "storage is down"
        assert events(plan.actions) == [("Warning", "SnapshotFailed")]

    def test_a_checkpoint_that_cannot_be_read_fails_at_once(self) -> None:
        outcome = SnapshotOutcome(task=SnapshotTask.TAKE, error="checkpoint chk-3 was pruned")
        pod = finished_pod(outcome, exit_code=ExitCode.RESTORE_FAILED)
        plan = plan_snapshot(observed(status=copying(), take_pod=pod), now=NOW)
        assert plan.status.state is SnapshotState.FAILED
        assert "pruned" in (plan.status.message or "")

    def test_a_retried_copy_keeps_its_hold_and_a_failed_one_lets_go(self) -> None:
        outcome = SnapshotOutcome(task=SnapshotTask.TAKE, error="storage is down")
        pod = finished_pod(outcome, exit_code=ExitCode.STORAGE_UNREACHABLE)
        retried = plan_snapshot(observed(status=copying(), take_pod=pod, held=5), now=NOW)
        failed = plan_snapshot(observed(status=copying(failures=MAX_TRIES - 1), take_pod=pod,
                                        held=5), now=NOW)
        assert not any(isinstance(a, ReleaseCheckpoint) for a in retried.actions)
        assert failed.actions[0] == ReleaseCheckpoint(store="sums-checkpoints", holder="s1")

    def test_a_hold_left_by_a_pass_that_ended_early_is_released_later(self) -> None:
        done = copying(state=SnapshotState.FAILED, message="no pod can be built")
        plan = plan_snapshot(observed(status=done, held=5), now=NOW)
        assert plan.actions == (ReleaseCheckpoint(store="sums-checkpoints", holder="s1"),)
        assert plan_snapshot(observed(status=done), now=NOW).actions == ()

    def test_a_pod_that_died_without_an_outcome_is_tried_again_and_quoted(self) -> None:
        pod = SnapshotPod(name="keep-take", phase="Failed", exit_code=137, reason="OOMKilled",
                          message="Traceback ... MemoryError")
        plan = plan_snapshot(observed(status=copying(), take_pod=pod), now=NOW)
        assert plan.status.failures == 1
        assert "OOMKilled" in (plan.status.message or "")

    def test_an_invalid_spec_fails_naming_the_field(self) -> None:
        plan = plan_snapshot(dataclasses.replace(observed(), spec=None,
                                                 spec_error="spec.jobName: is required"),
                             now=NOW)
        assert plan.status.state is SnapshotState.FAILED
        assert plan.status.reason == "InvalidSpec"
        assert plan.status.message == "spec.jobName: is required"


class TestDeletion:
    def test_a_copy_still_running_is_stopped_before_anything_is_deleted(self) -> None:
        plan = plan_snapshot(observed(status=copying(), deleting=True,
                                      take_pod=SnapshotPod(name="keep-take", phase="Running")),
                             now=NOW)
        assert plan.actions == (DeleteSnapshotPod("keep-take"),)

    def test_a_completed_snapshot_is_disposed_of_by_a_pod_built_from_the_recorded_spec(
            self) -> None:
        done = copying(state=SnapshotState.COMPLETED)
        plan = plan_snapshot(observed(status=done, deleting=True, job=False), now=NOW)
        assert plan.actions == (CreateSnapshotPod(
            name="keep-dispose", task=SnapshotTask.DISPOSE, target=TARGET, job_name="sums",
            job_uid="j1", job_spec=JOB_SPEC),)
        pod = finished_pod(SnapshotOutcome(task=SnapshotTask.DISPOSE, files=7),
                           name="keep-dispose")
        released = plan_snapshot(observed(status=done, deleting=True, dispose_pod=pod), now=NOW)
        assert released.actions[-1] == ReleaseSnapshot()
        assert events(released.actions) == [("Normal", "SnapshotDisposed")]

    def test_dispose_on_delete_false_keeps_a_completed_snapshot_and_says_where(self) -> None:
        done = copying(state=SnapshotState.COMPLETED, path=f"{TARGET}/sums-j1/chk-5/_metadata")
        plan = plan_snapshot(observed(spec=SnapshotSpec(job_name="sums", dispose_on_delete=False),
                                      status=done, deleting=True), now=NOW)
        assert plan.actions[-1] == ReleaseSnapshot()
        assert events(plan.actions) == [("Normal", "SnapshotKept")]
        assert not any(isinstance(a, CreateSnapshotPod) for a in plan.actions)

    def test_a_partial_copy_is_disposed_of_even_when_completed_ones_are_kept(self) -> None:
        failed = copying(state=SnapshotState.FAILED)
        plan = plan_snapshot(observed(spec=SnapshotSpec(job_name="sums", dispose_on_delete=False),
                                      status=failed, deleting=True), now=NOW)
        assert isinstance(plan.actions[0], CreateSnapshotPod)

    def test_a_snapshot_deleted_while_holding_lets_go_of_its_checkpoint(self) -> None:
        plan = plan_snapshot(observed(status=copying(), deleting=True, held=5,
                                      take_pod=SnapshotPod(name="keep-take", phase="Running")),
                             now=NOW)
        assert plan.actions == (ReleaseCheckpoint(store="sums-checkpoints", holder="s1"),
                                DeleteSnapshotPod("keep-take"))

    def test_a_snapshot_never_started_is_released_at_once(self) -> None:
        plan = plan_snapshot(observed(deleting=True), now=NOW)
        assert plan.actions == (ReleaseSnapshot(),)

    def test_storage_that_refuses_the_deletion_keeps_the_files_and_releases_the_object(
            self) -> None:
        pod = finished_pod(SnapshotOutcome(task=SnapshotTask.DISPOSE, error="access denied"),
                           exit_code=ExitCode.CLEANUP_FAILED, name="keep-dispose")
        plan = plan_snapshot(observed(status=copying(state=SnapshotState.COMPLETED),
                                      deleting=True, dispose_pod=pod), now=NOW)
        assert plan.actions[-1] == ReleaseSnapshot()
        warning = next(a for a in plan.actions if isinstance(a, EmitSnapshotEvent))
        assert warning.type == "Warning" and TARGET in warning.message
        assert "access denied" in warning.message
