"""plan() for a new job: what it ensures before the first driver, in which order, and
what that driver is asked to restore."""

from __future__ import annotations

import dataclasses

import pytest
from operator_world import IMAGE, T0, at, checkpoint, driver, kinds, make_job, observe, reasons, run

from cjob_lifecycle.actions import AdvanceFence, CreateDriver, EmitEvent, RequeueAfter
from cjob_lifecycle.observed import Observed, RestoreSnapshot, StoreView
from cjob_lifecycle.plan import PlanSettings, plan
from cjob_spec import JobStatus, Phase, Reason
from cjob_spec.snapshot import SnapshotState


class TestANewJob:
    """Everything a job's first attempt needs is ensured before its driver."""

    def test_a_new_job_gets_its_store_rbac_service_fence_and_first_driver_in_that_order(
        self,
    ) -> None:
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
        assert reasons(result) == [Reason.STARTED]

    def test_a_local_mode_job_needs_no_driver_service(self) -> None:
        job = make_job(**{"spark.master": "local[2]"})
        result = run(observe(job, JobStatus()), T0)
        assert "EnsureService" not in kinds(result)
        assert "CreateDriver" in kinds(result)

    def test_an_operator_without_network_policies_gives_the_job_none(self) -> None:
        observed = observe(make_job(), JobStatus(), store=StoreView(exists=False))
        result = plan(observed, now=T0, settings=PlanSettings(network_policies=False))
        assert "EnsureNetworkPolicy" not in kinds(result)
        assert "CreateDriver" in kinds(result)

    def test_an_existing_store_is_not_recreated(self) -> None:
        result = run(observe(make_job(), JobStatus(), store=StoreView(exists=True)), T0)
        assert "EnsureCheckpointConfigMap" not in kinds(result)

    def test_a_job_created_suspended_does_not_start(self) -> None:
        result = run(observe(make_job(suspend=True), JobStatus()), T0)
        assert "CreateDriver" not in kinds(result)
        assert result.status.phase is Phase.SUSPENDED
        assert reasons(result) == [Reason.SUSPENDED]

    def test_attempt_numbers_never_go_back_even_if_status_was_lost(self) -> None:
        old = driver(6, "Failed", exit_code=1)
        result = run(
            observe(make_job(), JobStatus(), old, store=StoreView(exists=True, fence_attempt=7)), T0
        )
        assert result.of_type(CreateDriver)[0].attempt == 8
        assert result.of_type(AdvanceFence) == [AdvanceFence(attempt=8)]


class TestCheckpointsTheNextPodCannotRead:
    """Checkpoints on a pod's own disk are lost with the pod: the job is told at every start."""

    def test_file_checkpoints_the_next_pod_cannot_read_are_reported_at_each_start(self) -> None:
        job = make_job(checkpoint={"storage": "file:///ckpt"})
        result = run(observe(job, JobStatus()), T0)
        assert "CreateDriver" in kinds(result)
        warnings = [e for e in result.of_type(EmitEvent)
                    if e.reason == Reason.CHECKPOINTS_NOT_PERSISTENT]
        assert len(warnings) == 1 and warnings[0].type == "Warning"
        assert "file:///ckpt" in warnings[0].message

    def test_file_checkpoints_on_a_persistent_volume_raise_no_warning(self) -> None:
        job = make_job(checkpoint={"storage": "file:///ckpt/jobs"}, pod={
            "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "c"}}],
            "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}]})
        result = run(observe(job, JobStatus()), T0)
        assert "CreateDriver" in kinds(result)
        assert Reason.CHECKPOINTS_NOT_PERSISTENT not in reasons(result)


class TestWhatTheFirstDriverRestores:
    """The store's latest checkpoint, else what the spec names; claimed once the driver says so."""

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
        self, restore_from: object, pointer: str, origin: str
    ) -> None:
        job = make_job(**{"restore.from": restore_from})
        result = run(observe(job, JobStatus()), T0)
        assert result.of_type(CreateDriver)[0].restore_pointer == pointer
        assert result.status.message is not None and result.status.message.endswith(origin)
        assert result.status.restored_from is None, "set only once the driver reports"

    def test_a_store_that_already_holds_checkpoints_wins_over_the_spec(self) -> None:
        job = make_job(**{"restore.from": 12})
        store = StoreView(exists=True, latest=checkpoint(40, at(-60)), fence_attempt=0)
        result = run(observe(job, JobStatus(), store=store), T0)
        assert result.of_type(CreateDriver)[0].restore_pointer == "latest"
        assert result.status.message is not None and result.status.message.endswith("checkpoint 40")
        assert result.status.restored_from is None, "set only once the driver reports"


class TestStartingFromASnapshotObject:
    """``spec.restore.snapshot``: a fresh start waits until the snapshot is Completed,
    then restores its copy; a job with checkpoints of its own restores those."""

    SNAPSHOT_PATH = "s3://ckpt/jobs/snapshots/keep-s1/sums-u0/chk-7/_metadata"

    def observed_with(self, view: RestoreSnapshot | None,
                      store: StoreView | None = None) -> Observed:
        base = observe(make_job(**{"restore.snapshot": "keep"}), JobStatus(), store=store)
        return dataclasses.replace(base, restore_snapshot=view)

    def test_a_completed_snapshot_is_what_the_first_driver_restores(self) -> None:
        view = RestoreSnapshot(name="keep", state=SnapshotState.COMPLETED,
                               path=self.SNAPSHOT_PATH, checkpoint_id=7, job_name="sums")
        result = run(self.observed_with(view), T0)
        assert result.of_type(CreateDriver)[0].restore_pointer == self.SNAPSHOT_PATH
        assert result.status.message is not None
        assert result.status.message.endswith("snapshot keep (checkpoint 7 of job sums)")

    @pytest.mark.parametrize(("view", "words"), [
        (None, "does not exist"),
        (RestoreSnapshot(name="keep"), "does not exist"),
        (RestoreSnapshot(name="keep", state=SnapshotState.IN_PROGRESS, message="copying"),
         "to complete (copying)"),
        (RestoreSnapshot(name="keep", state=SnapshotState.FAILED, message="pruned"),
         "failed (pruned)"),
    ])
    def test_the_job_waits_pending_until_the_snapshot_is_completed(
            self, view: RestoreSnapshot | None, words: str) -> None:
        result = run(self.observed_with(view), T0)
        assert result.of_type(CreateDriver) == []
        assert result.status.phase is Phase.PENDING
        assert result.status.reason == Reason.WAITING_FOR_SNAPSHOT
        assert words in (result.status.message or "")
        assert result.of_type(RequeueAfter), "it looks again"

    def test_waiting_for_the_snapshot_over_several_passes_is_no_failure(self) -> None:
        # Waiting Pending with no driver pod once read as a driver pod that disappeared:
        # every later pass before the copy completed counted a failed attempt.
        copying = RestoreSnapshot(name="keep", state=SnapshotState.IN_PROGRESS,
                                  message="copying")
        first = run(self.observed_with(copying), T0)
        later = run(dataclasses.replace(self.observed_with(copying), status=first.status),
                    at(120))
        assert (later.status.phase, later.status.reason) == (
            Phase.PENDING, Reason.WAITING_FOR_SNAPSHOT)
        assert later.status.restarts == 0
        assert later.status.last_failure is None
        done = RestoreSnapshot(name="keep", state=SnapshotState.COMPLETED,
                               path=self.SNAPSHOT_PATH, checkpoint_id=7, job_name="sums")
        started = run(dataclasses.replace(self.observed_with(done), status=later.status),
                      at(130))
        (created,) = started.of_type(CreateDriver)
        assert (created.attempt, created.restore_pointer) == (1, self.SNAPSHOT_PATH)
        assert started.status.reason == Reason.STARTED

    def test_a_job_with_checkpoints_of_its_own_restores_its_latest_not_the_snapshot(
            self) -> None:
        store = StoreView(exists=True, latest=checkpoint(40, at(-60)), fence_attempt=0)
        result = run(self.observed_with(None, store=store), T0)
        assert result.of_type(CreateDriver)[0].restore_pointer == "latest"
