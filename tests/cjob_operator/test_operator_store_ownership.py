"""A checkpoint store that is not the job's own is never adopted.

A job's store, the ``<job>-checkpoints`` ConfigMap, is created owned by the job. When
a job is deleted and created again under the same name, the name may still be taken:
by the deleted job's store, until the garbage collector deletes it (the new job
waits), or by a ConfigMap no job owns, left by an orphaning delete or made by hand
(the job fails with ``StoreConflict`` and says how to go on). Either way the operator
neither fences nor restores from it, and a driver is never started on it.
"""

from __future__ import annotations

from cjob_operator.cluster import StoreReading
from cjob_operator.observed import store_ownership
from operator_world import T0, at, make_job, observe, run

from cjob_checkpoint.store.configmap_layout import StoreOwner
from cjob_lifecycle.actions import AdvanceFence, CreateDriver, EmitEvent, EnsureCheckpointConfigMap
from cjob_lifecycle.observed import StoreOwnership, StoreView
from cjob_lifecycle.plan import Plan
from cjob_spec import JobStatus, Phase
from cjob_spec.status import CheckpointRef

OLD = CheckpointRef(id=12, path="s3://ckpt/sums-old-uid/chk-12/_metadata")
DELETED_JOBS = StoreView(exists=True, ownership=StoreOwnership.DELETED_JOB, latest=OLD,
                         fence_attempt=4)
UNOWNED = StoreView(exists=True, ownership=StoreOwnership.OTHER, latest=OLD, fence_attempt=4)


def touches_the_store_or_starts(result: Plan) -> bool:
    return bool(result.of_type(CreateDriver) or result.of_type(AdvanceFence)
                or result.of_type(EnsureCheckpointConfigMap))


def reading(*owners: StoreOwner) -> StoreReading:
    return StoreReading(fence_attempt=1, latest=None, size_bytes=100, owners=owners)


class TestWhoseStoreItIs:
    def test_a_store_owned_by_the_job_is_its_own(self) -> None:
        own = reading(StoreOwner(name="clicks", uid="u-2"))
        assert store_ownership(own, job_name="clicks", job_uid="u-2") is StoreOwnership.THIS_JOB

    def test_a_store_owned_by_an_earlier_job_of_the_same_name_is_a_deleted_jobs(self) -> None:
        old = reading(StoreOwner(name="clicks", uid="u-1"))
        assert store_ownership(old, job_name="clicks", job_uid="u-2") is \
            StoreOwnership.DELETED_JOB

    def test_a_store_owned_by_no_job_or_another_job_is_someone_elses(self) -> None:
        assert store_ownership(reading(), job_name="clicks", job_uid="u-2") is StoreOwnership.OTHER
        other = reading(StoreOwner(name="views", uid="u-9"))
        assert store_ownership(other, job_name="clicks", job_uid="u-2") is StoreOwnership.OTHER


class TestADeletedJobsStore:
    def test_a_new_job_waits_for_the_garbage_collector_and_touches_nothing(self) -> None:
        result = run(observe(make_job(), JobStatus(), store=DELETED_JOBS), T0)
        assert not touches_the_store_or_starts(result)
        assert result.status.phase is None
        assert result.status.reason == "WaitingForPreviousStore"
        assert result.requeue_after is not None and result.requeue_after <= 5

    def test_once_it_is_gone_the_job_starts_fresh_with_its_own_store(self) -> None:
        waiting = run(observe(make_job(), JobStatus(), store=DELETED_JOBS), T0).status
        result = run(observe(make_job(), waiting, store=StoreView(exists=False)), at(5))
        (create,) = result.of_type(CreateDriver)
        assert create.restore_pointer == "latest"
        assert result.of_type(EnsureCheckpointConfigMap) != []


class TestAStoreNoJobOwns:
    def test_the_job_fails_with_store_conflict_and_says_how_to_go_on(self) -> None:
        result = run(observe(make_job(), JobStatus(), store=UNOWNED), T0)
        assert not touches_the_store_or_starts(result)
        status = result.status
        assert (status.phase, status.reason) == (Phase.FAILED, "StoreConflict")
        failed = status.condition("Failed")
        assert failed is not None and failed.reason == "StoreConflict"
        (event,) = [e for e in result.of_type(EmitEvent) if e.reason == "StoreConflict"]
        assert event.type == "Warning"
        assert "clicks-checkpoints" in event.message and "delete it" in event.message
        assert OLD.path in event.message and "spec.restore.allowForeignJob" in event.message
        assert status.restarts == 0, "no restart budget is spent"

    def test_while_the_conflict_lasts_the_job_looks_again_without_new_events(self) -> None:
        failed = run(observe(make_job(), JobStatus(), store=UNOWNED), T0).status
        result = run(observe(make_job(), failed, store=UNOWNED), at(30))
        assert not touches_the_store_or_starts(result)
        assert result.of_type(EmitEvent) == []
        assert result.requeue_after is not None

    def test_deleting_the_configmap_starts_the_job(self) -> None:
        failed = run(observe(make_job(), JobStatus(), store=UNOWNED), T0).status
        result = run(observe(make_job(), failed, store=StoreView(exists=False)), at(30))
        (create,) = result.of_type(CreateDriver)
        assert create.restore_pointer == "latest"
        assert result.status.phase is Phase.PENDING

    def test_deleting_it_and_allowing_the_foreign_checkpoint_continues_from_it(self) -> None:
        failed = run(observe(make_job(), JobStatus(), store=UNOWNED), T0).status
        job = make_job(restore={"from": OLD.path, "allowForeignJob": True})
        result = run(observe(job, failed, store=StoreView(exists=False)), at(30))
        (create,) = result.of_type(CreateDriver)
        assert create.restore_pointer == OLD.path
