"""Snapshots the operator takes of a job by itself (``spec.snapshots``).

Periodic: while the job runs and has a checkpoint, one CheckpointedJobSnapshot every
``interval`` (none while one is still being taken). Before an upgrade: with
``beforeUpgrade``, the final checkpoint of an ``upgradeMode: Snapshot`` upgrade,
whose output the sinks committed before the driver stopped, is copied too, so the
state from before the change survives ``retained`` and the job's deletion. Both are
ordinary snapshot objects, labelled with the job and why they were taken, and the
snapshot controller copies them; they are not owned by the job, so deleting the job
leaves them. Pruning deletes the oldest completed ones beyond ``maxCount`` or older
than ``maxAge`` (never the newest completed one), and failed ones once a newer one
completed; a deleted snapshot's copy goes with it (``disposeOnDelete``).
"""

from __future__ import annotations

from datetime import timedelta

from cjob_lifecycle.actions import CreateSnapshot, DeleteSnapshot
from cjob_lifecycle.observed import JobSnapshot
from cjob_lifecycle.plan.draft import Draft
from cjob_spec.names import scheduled_snapshot_name, upgrade_snapshot_name
from cjob_spec.snapshot import SnapshotState, SnapshotTrigger
from cjob_spec.status import Phase
from cjob_spec.times import to_utc


def schedule_snapshots(draft: Draft) -> None:
    """Take the periodic snapshot that is due, and prune the old ones."""
    schedule = draft.job.spec.snapshots
    if not schedule.in_use:
        return
    own = sorted(draft.observed.snapshots, key=lambda s: to_utc(s.created_at), reverse=True)
    _prune(draft, own)
    if not schedule.periodic or draft.status.phase is not Phase.RUNNING:
        return
    if draft.status.latest_checkpoint is None:
        return
    periodic = [s for s in own if s.trigger is SnapshotTrigger.SCHEDULED]
    if any(s.state is None or not s.state.is_final for s in periodic):
        draft.requeue_in(draft.settings.poll_seconds)
        return
    interval = timedelta(seconds=schedule.interval.seconds)
    newest = periodic[0].created_at if periodic else None
    if newest is not None and draft.now < to_utc(newest) + interval:
        draft.requeue_at(to_utc(newest) + interval)
        return
    name = scheduled_snapshot_name(draft.name, stamp=draft.now.strftime("%Y%m%d%H%M%S"))
    draft.act(CreateSnapshot(name=name, trigger=SnapshotTrigger.SCHEDULED))
    draft.requeue_in(schedule.interval.seconds)


def snapshot_before_upgrade(draft: Draft, *, checkpoint_id: int) -> None:
    """With ``beforeUpgrade``: copy the final checkpoint an upgrade starts from."""
    if draft.job.spec.snapshots.before_upgrade:
        draft.act(CreateSnapshot(
            name=upgrade_snapshot_name(draft.name, generation=draft.observed.generation),
            trigger=SnapshotTrigger.UPGRADE, checkpoint_id=checkpoint_id))


def _prune(draft: Draft, own: list[JobSnapshot]) -> None:
    """``own`` newest first: delete what ``maxCount`` and ``maxAge`` no longer keep."""
    schedule = draft.job.spec.snapshots
    completed = [s for s in own if s.state is SnapshotState.COMPLETED]
    keep = set(s.name for s in completed[:schedule.max_count])
    if schedule.max_age.seconds > 0:
        oldest = draft.now - timedelta(seconds=schedule.max_age.seconds)
        keep = {name for name in keep
                if to_utc(next(s.created_at for s in completed if s.name == name)) >= oldest}
    if completed:
        keep.add(completed[0].name)  # the newest copy of the state is never given up
    newest_completed = to_utc(completed[0].created_at) if completed else None
    for snapshot in own:
        if (snapshot.state is SnapshotState.COMPLETED and snapshot.name not in keep) or (snapshot.state is SnapshotState.FAILED and newest_completed is not None
              and to_utc(snapshot.created_at) < newest_completed):
            draft.act(DeleteSnapshot(name=snapshot.name))
    if schedule.max_age.seconds > 0 and len(completed) > 1:
        nxt = min(to_utc(s.created_at) for s in completed if s.name in keep)
        draft.requeue_at(nxt + timedelta(seconds=schedule.max_age.seconds))
