"""A job whose status records a completed checkpoint never starts from an empty state
because its checkpoint store (the ``<job>-checkpoints`` ConfigMap) was lost: deleted
by hand, by a garbage collector or by another job's driver. The operator refuses with
``StoreLost`` (condition, Event, ``lastFailure``) and names the checkpoint; the user
resumes from it explicitly with ``spec.restore.from``."""

from __future__ import annotations

from operator_world import T0, at, make_job, observe, run

from cjob_lifecycle.actions import CreateDriver, EmitEvent, EnsureCheckpointConfigMap
from cjob_lifecycle.observed import StoreView
from cjob_spec import JobStatus, Phase, Reason
from cjob_spec.status import CheckpointRef

CHECKPOINT = CheckpointRef(id=7, path="s3://ckpt/clicks-uid/chk-7/_metadata")
RESTARTING = JobStatus(phase=Phase.RESTARTING, attempt=2, restarts=1, latest_checkpoint=CHECKPOINT)


class TestALostStore:
    """A store that no longer records the job's latest checkpoint fails the job, naming it."""

    def test_a_lost_store_stops_the_restart_instead_of_starting_empty(self) -> None:
        result = run(observe(make_job(), RESTARTING, store=StoreView(exists=False)), at(3600))
        assert result.of_type(CreateDriver) == []
        assert result.of_type(EnsureCheckpointConfigMap) == []
        status = result.status
        assert (status.phase, status.reason) == (Phase.FAILED, Reason.STORE_LOST)
        assert status.latest_checkpoint == CHECKPOINT
        assert status.last_failure is not None and status.last_failure.reason == Reason.STORE_LOST
        failed = status.condition("Failed")
        assert failed is not None and failed.reason == Reason.STORE_LOST
        (event,) = [e for e in result.of_type(EmitEvent) if e.reason == Reason.STORE_LOST]
        assert event.type == "Warning"
        assert "checkpoint 7" in event.message and CHECKPOINT.path in event.message
        assert "spec.restore.from" in event.message

    def test_an_emptied_store_is_lost_too(self) -> None:
        emptied = StoreView(exists=True, latest=None, fence_attempt=2)
        result = run(observe(make_job(), RESTARTING, store=emptied), at(3600))
        assert result.of_type(CreateDriver) == []
        assert result.status.reason == Reason.STORE_LOST

    def test_a_store_that_went_back_to_an_older_checkpoint_is_lost_too(self) -> None:
        older = StoreView(exists=True, latest=CheckpointRef(id=3, path="s3://x/chk-3/_metadata"))
        result = run(observe(make_job(), RESTARTING, store=older), at(3600))
        assert result.status.reason == Reason.STORE_LOST


class TestStartsThatNeedNoLostCheckpoint:
    """An intact store, a first start, or the lost checkpoint named in the spec start the job."""

    def test_a_store_that_still_records_the_checkpoint_restarts_from_latest(self) -> None:
        intact = StoreView(exists=True, latest=CHECKPOINT, fence_attempt=2)
        result = run(observe(make_job(), RESTARTING, store=intact), at(3600))
        (create,) = result.of_type(CreateDriver)
        assert create.restore_pointer == "latest"

    def test_naming_the_checkpoint_in_spec_restore_from_resumes_a_job_whose_store_was_lost(
        self,
    ) -> None:
        lost = StoreView(exists=False)
        failed = run(observe(make_job(), RESTARTING, store=lost), at(3600)).status
        job = make_job(restore={"from": CHECKPOINT.path})
        result = run(observe(job, failed, store=lost), at(3660))
        (create,) = result.of_type(CreateDriver)
        assert create.restore_pointer == CHECKPOINT.path
        assert result.of_type(EnsureCheckpointConfigMap) != []
        assert result.status.phase is Phase.PENDING
        assert result.status.message is not None and result.status.message.endswith(CHECKPOINT.path)
        assert result.status.restored_from is None, "set only once the driver reports"

    def test_a_first_start_needs_no_store(self) -> None:
        result = run(observe(make_job(), JobStatus(), store=StoreView(exists=False)), T0)
        (create,) = result.of_type(CreateDriver)
        assert create.restore_pointer == "latest"
