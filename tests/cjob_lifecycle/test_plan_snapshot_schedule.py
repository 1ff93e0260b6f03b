"""``spec.snapshots``: the snapshots the operator takes of a running job by itself, one
before each snapshot-mode upgrade, and the old ones it prunes."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from operator_world import at, checkpoint, driver, make_job, observe, run, status

from cjob_lifecycle.actions import CreateSnapshot, DeleteSnapshot
from cjob_lifecycle.observed import JobSnapshot, Observed, StoreView
from cjob_spec import JobStatus, Phase
from cjob_spec.snapshot import SnapshotState, SnapshotTrigger

HOURLY = {"snapshots.interval": "1h", "snapshots.maxCount": 2}
STORE = StoreView(exists=True, latest=checkpoint(9, at(50)), fence_attempt=1)


def running(fields: dict[str, object], *snapshots: JobSnapshot) -> Observed:
    job = make_job(**fields)
    observed = observe(job, status(Phase.RUNNING, 1, job=job), driver(1, job=job), store=STORE)
    return dataclasses.replace(observed, snapshots=snapshots)


def taken(name: str, created: datetime, state: SnapshotState | None = SnapshotState.COMPLETED,
          trigger: SnapshotTrigger = SnapshotTrigger.SCHEDULED) -> JobSnapshot:
    return JobSnapshot(name=name, trigger=trigger, created_at=created, state=state)


class TestPeriodicSnapshots:
    def test_a_job_without_a_schedule_gets_none(self) -> None:
        assert run(running({}), at(60)).of_type(CreateSnapshot) == []

    def test_a_running_job_with_a_checkpoint_gets_its_first_at_once(self) -> None:
        result = run(running(HOURLY), at(60))
        assert result.of_type(CreateSnapshot) == [CreateSnapshot(
            name="clicks-s-20240501120100", trigger=SnapshotTrigger.SCHEDULED)]

    def test_the_next_is_due_an_interval_after_the_newest(self) -> None:
        recent = taken("clicks-s-1", at(0))
        early = run(running(HOURLY, recent), at(1800))
        assert early.of_type(CreateSnapshot) == []
        assert early.requeue_after is not None and early.requeue_after <= 1800
        assert len(run(running(HOURLY, recent), at(3601)).of_type(CreateSnapshot)) == 1

    def test_none_is_started_while_one_is_still_being_taken(self) -> None:
        copying = taken("clicks-s-1", at(0), SnapshotState.IN_PROGRESS)
        assert run(running(HOURLY, copying), at(7200)).of_type(CreateSnapshot) == []

    def test_a_job_that_is_not_running_gets_none(self) -> None:
        job = make_job(**HOURLY)
        pending = observe(job, JobStatus(), store=STORE)
        assert run(pending, at(60)).of_type(CreateSnapshot) == []


class TestPruning:
    def test_completed_snapshots_beyond_max_count_go_oldest_first(self) -> None:
        snapshots = [taken(f"clicks-s-{i}", at(i * 3600)) for i in range(4)]
        result = run(running(HOURLY, *snapshots), at(4 * 3600 - 1))
        assert sorted(result.of_type(DeleteSnapshot), key=lambda d: d.name) == [
            DeleteSnapshot("clicks-s-0"), DeleteSnapshot("clicks-s-1")]

    def test_old_snapshots_go_but_the_newest_completed_one_stays(self) -> None:
        fields = {**HOURLY, "snapshots.maxCount": 10, "snapshots.maxAge": "2h"}
        snapshots = [taken("clicks-s-old", at(0)), taken("clicks-s-newest", at(600))]
        result = run(running(fields, *snapshots), at(5 * 3600))
        assert result.of_type(DeleteSnapshot) == [DeleteSnapshot("clicks-s-old")]

    def test_a_failed_snapshot_goes_once_a_newer_one_completed(self) -> None:
        snapshots = [taken("clicks-s-good", at(3600)),
                     taken("clicks-s-bad", at(0), SnapshotState.FAILED),
                     taken("clicks-s-later", at(4000), SnapshotState.FAILED)]
        result = run(running(HOURLY, *snapshots), at(4100))
        assert result.of_type(DeleteSnapshot) == [DeleteSnapshot("clicks-s-bad")]


class TestBeforeAnUpgrade:
    def test_the_final_checkpoint_of_a_snapshot_upgrade_is_copied_when_asked(self) -> None:
        fields = {"upgradeMode": "Snapshot", "snapshots.beforeUpgrade": True}
        old = make_job(**fields)
        new = dataclasses.replace(
            make_job(**fields, image="example.org/clicks:2.0"),
            metadata=dataclasses.replace(old.metadata, generation=2))
        final = checkpoint(10, at(62))
        handing_off = status(Phase.RUNNING, 3, job=old, reason="Upgrading",
                             suspend_requested_at=at(60), latest_checkpoint=final)
        stopped = driver(3, "Failed", job=old, exit_code=8, finished=at(64))
        ended = run(observe(new, handing_off, stopped,
                            store=StoreView(exists=True, latest=final, fence_attempt=3)), at(65))
        assert ended.of_type(CreateSnapshot) == [CreateSnapshot(
            name="clicks-u-2", trigger=SnapshotTrigger.UPGRADE, checkpoint_id=10)]
