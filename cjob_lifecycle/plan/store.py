"""Guards on the checkpoint store, and what a driver reports it restored from it.

The store (the ``<job>-checkpoints`` ConfigMap, or the embedded runner's file store)
is where every attempt restores from, so an attempt starts only from a store that is
the job's own and still holds what the job completed. A store that was lost, or whose
name another object took, fails the job with what to do instead of starting it from
an empty state or from another job's checkpoints.
"""

from __future__ import annotations

from cjob_lifecycle.observed import StoreOwnership
from cjob_lifecycle.plan.draft import Draft
from cjob_lifecycle.plan.failures import fail_before_start
from cjob_spec.names import checkpoint_configmap_name
from cjob_spec.reasons import Reason
from cjob_spec.status import CheckpointRef, DiscardedReplacement, RestoredFrom

STORE_GC_RECHECK_SECONDS = 5.0
STORE_CONFLICT_RECHECK_SECONDS = 30.0
"""How often a job blocked by a store that is not its own looks again: the operator
does not watch ConfigMaps, and the garbage collector (soon) or the user frees it."""


def lost_checkpoint(draft: Draft) -> CheckpointRef | None:
    """The completed checkpoint the job's status records but its store no longer does.

    The store only ever moves forward, so a missing or emptied store, or one whose
    newest checkpoint is older than the one the status recorded, was lost: deleted by
    hand, by a garbage collector or by another job's driver. Restarting with
    ``--restore latest`` would then start from nothing, count checkpoint ids from 1
    again and replay the whole input into the output.
    """
    recorded = draft.observed.status.latest_checkpoint
    if recorded is None:
        return None
    store = draft.observed.store
    if store.exists and store.latest is not None and store.latest.id >= recorded.id:
        return None
    return recorded


def fail_store_lost(draft: Draft, lost: CheckpointRef) -> None:
    """Refuse to start from an empty state; say how to resume from the checkpoint."""
    fail_before_start(
        draft,
        reason=Reason.STORE_LOST,
        message=(
            f"the checkpoint store {checkpoint_configmap_name(draft.name)} no longer records "
            f"checkpoint {lost.id}, which this job completed; not starting from an empty "
            f"state. To resume from it, set spec.restore.from to {lost.path}"
        ),
    )


def refuse_foreign_store(draft: Draft) -> None:
    """The job's store name is taken by a ConfigMap that is not the job's: never adopt it.

    Adopting it would restore another job's checkpoints (refused by the driver) or,
    worse, let the garbage collector delete the store under the running job, since it
    still names its deleted owner. A deleted job's store goes away by itself: wait. Any
    other owner needs the user: fail with what to do, and look again now and then.
    """
    name = checkpoint_configmap_name(draft.name)
    if draft.observed.store.ownership is StoreOwnership.DELETED_JOB:
        draft.requeue_in(STORE_GC_RECHECK_SECONDS)
        if draft.status.phase is None:
            draft.set(reason=Reason.WAITING_FOR_PREVIOUS_STORE)
        draft.set(message=f"waiting for the garbage collector to delete the checkpoint store "
                          f"{name} of a deleted job of the same name")
        return
    draft.requeue_in(STORE_CONFLICT_RECHECK_SECONDS)
    latest = draft.observed.store.latest
    resume = (
        f"; to continue from its latest checkpoint, delete it and set spec.restore.from to "
        f"{latest.path} and spec.restore.allowForeignJob to true"
        if latest is not None else ""
    )
    fail_before_start(
        draft,
        reason=Reason.STORE_CONFLICT,
        message=(
            f"the ConfigMap {name} exists but is not this job's checkpoint store (it is not "
            f"owned by this CheckpointedJob); delete it to start the job{resume}"
        ),
    )


def take_restore_report(draft: Draft) -> None:
    """Set ``restoredFrom`` from the current attempt's report; warn once on a fallback,
    and once when the driver dropped state the pipeline no longer maps.

    Only the driver knows what it restored (it may fall back to an older checkpoint
    when ``spec.restore.onUnreadable`` allows it), so ``restoredFrom`` stays unset
    from the start of an attempt until its driver's report is in the store. A report
    of another attempt is about an earlier driver and is ignored. The Event goes with
    the change of ``restoredFrom``, which the status records, so it is posted once.
    """
    report = draft.observed.store.restore_report if draft.observed.store.is_own else None
    if report is None or report.attempt < 1 or report.attempt != draft.status.attempt:
        return
    restored = report.checkpoint
    reported = None if restored is None else RestoredFrom(id=restored.id, path=restored.path)
    if reported == draft.status.restored_from:
        return
    draft.set(restored_from=reported)
    skipped = report.fallback_from
    if restored is not None and skipped is not None:
        draft.event(
            "Warning",
            Reason.RESTORED_FROM_FALLBACK,
            f"attempt {report.attempt} restored checkpoint {restored.id} ({restored.path}) "
            f"because the newer checkpoint {skipped.id} ({skipped.path}) is unreadable "
            f"(spec.restore.onUnreadable: FallbackToPrevious); the records processed after "
            f"checkpoint {restored.id} are processed again",
        )
    if restored is not None and report.dropped:
        draft.event(
            "Warning",
            Reason.NON_RESTORED_STATE,
            f"attempt {report.attempt} restored checkpoint {restored.id} without state the "
            f"pipeline no longer maps (spec.restore.allowNonRestoredState), which starts "
            f"empty: {'; '.join(report.dropped)}",
        )


def redeploy_in_effect(draft: Draft) -> bool:
    """Whether attempts restore ``spec.restore``'s starting point instead of the latest
    checkpoint: a redeploy discarded the state the store's latest checkpoint holds, and
    no later attempt completed one of its own yet."""
    return (draft.status.discarded_replacement is DiscardedReplacement.RESTORE_SOURCE
            and discarded(draft))


def discarded(draft: Draft) -> bool:
    """Whether the latest checkpoint holds state a Stateless upgrade discarded: it is
    no newer than the one seen at the change, or the stopped attempt's driver completed
    it on its way out (a store that does not say who wrote it counts as that)."""
    through = draft.status.discarded_through
    latest = draft.status.latest_checkpoint
    if through is None or latest is None:
        return False
    if latest.id <= through:
        return True
    stopped = draft.status.discarded_attempt
    writer = draft.observed.store.latest_attempt if draft.observed.store.is_own else None
    return stopped is not None and (writer is None or writer <= stopped)
