"""``plan_snapshot(observed) -> actions + status`` for one CheckpointedJobSnapshot.

A snapshot goes Pending (its job, or the job's checkpoint, is not there yet) ->
InProgress (a pod copies the checkpoint) -> Completed or Failed, and stays there:
its spec cannot change. The copy is made by a pod, never by the operator, because
only the job's pods hold the storage's credentials and volumes; the pod's outcome is
its termination message (:class:`SnapshotOutcome`). A copy that failed because
storage was unreachable, or whose pod died without a word (evicted, out of memory),
is tried again by a new pod, at most ``MAX_TRIES`` times in all; a checkpoint that
cannot be read (damaged) fails at once.

The job keeps running while its checkpoint is copied, and prunes every checkpoint
beyond ``retained`` as newer ones complete: a copy slower than that would lose its
source half way. So before the pod is made the snapshot *holds* the checkpoint in the
job's store (:mod:`cjob_checkpoint.store.holds`), in a swap that succeeds only while
the checkpoint is retained, and it releases the hold once the copy is over, however it
ended. Which checkpoint is copied is read from the store, not from the job's status,
which may still name one already pruned; a hold refused because the checkpoint went
meanwhile is simply asked again, for the newest.

Deleting a snapshot stops a copy still running, then deletes the copy when
``disposeOnDelete`` is set (and always a partial one), by a second pod built from
the job's spec recorded when the copy started, so that works after the job is gone.
A copy that cannot be deleted is kept and named in a Warning: deletion is not
blocked forever by storage that refuses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from cjob_lifecycle.snapshot_actions import (
    CreateSnapshotPod,
    DeleteSnapshotPod,
    EmitSnapshotEvent,
    HoldCheckpoint,
    ReleaseCheckpoint,
    ReleaseSnapshot,
    SnapshotAction,
)
from cjob_lifecycle.snapshot_observed import SnapshotObserved, SnapshotPod
from cjob_spec.exit_codes import ExitCode
from cjob_spec.names import snapshot_directory, snapshot_pod_name
from cjob_spec.snapshot import SnapshotReason, SnapshotState, SnapshotStatus
from cjob_spec.snapshot_outcome import SnapshotOutcome, SnapshotOutcomeError, SnapshotTask
from cjob_spec.status import ConditionStatus, ConditionType, set_condition

MAX_TRIES = 3
WAIT_SECONDS = 10.0
"""How often a Pending snapshot looks at its job again."""
POLL_SECONDS = 2.0
"""How often a snapshot looks at its running pod."""
HOLD_SECONDS = 0.5
"""How soon a snapshot that asked for a hold looks whether it got it."""


@dataclass(frozen=True)
class SnapshotPlan:
    actions: tuple[SnapshotAction, ...]
    status: SnapshotStatus
    requeue_after: float | None = None
    """Look again after this long; ``None``: only when the object changes."""


def plan_snapshot(observed: SnapshotObserved, *, now: datetime) -> SnapshotPlan:
    plan = _plan(observed, now=now)
    job = observed.job
    over = observed.deleting or (plan.status.state is not None and plan.status.state.is_final)
    if over and job is not None and job.held is not None:
        # Released first: should it fail, the pass fails before the status is written.
        release = ReleaseCheckpoint(store=job.store, holder=observed.uid)
        return replace(plan, actions=(release, *plan.actions))
    return plan


def _plan(observed: SnapshotObserved, *, now: datetime) -> SnapshotPlan:
    if observed.deleting:
        return _plan_deletion(observed)
    status = observed.status
    if status.state is not None and status.state.is_final:
        return SnapshotPlan(actions=(), status=_stamped(observed, status, now=now))
    if observed.spec is None:
        return _fail(observed, reason=SnapshotReason.INVALID_SPEC,
                     message=observed.spec_error or "the spec is not valid", now=now)
    if status.state is SnapshotState.IN_PROGRESS and status.target and status.source:
        return _follow_copy(observed, now=now)
    return _start_copy(observed, now=now)


def _start_copy(observed: SnapshotObserved, *, now: datetime) -> SnapshotPlan:
    spec = observed.spec
    assert spec is not None
    job = observed.job
    if job is None:
        return _pending(observed, SnapshotReason.WAITING_FOR_JOB,
                        f"no CheckpointedJob {spec.job_name} in this namespace", now=now)
    latest = job.latest
    wanted = spec.checkpoint_id
    if wanted is None:
        # The newest when first asked; once held, that one (checkpoints keep completing,
        # and chasing each newer one would never start the copy).
        held = job.retained(job.held) if job.held is not None else None
        wanted = held.id if held is not None else latest.id if latest is not None else None
    if latest is None or wanted is None or wanted > latest.id:
        what = f"checkpoint {wanted}" if spec.checkpoint_id is not None else "a checkpoint"
        return _pending(observed, SnapshotReason.WAITING_FOR_CHECKPOINT,
                        f"waiting for job {spec.job_name} to complete {what}", now=now)
    chosen = job.retained(wanted)
    if chosen is None:
        kept = ", ".join(str(ref.id) for ref in job.checkpoints)
        return _fail(observed, reason=SnapshotReason.NOT_RETAINED,
                     message=f"checkpoint {wanted} of job {spec.job_name} is no longer "
                             f"retained (its store keeps {kept}); name one of those, or "
                             f"leave spec.checkpoint out for the newest", now=now)
    if job.held != wanted:
        message = (f"holding checkpoint {wanted} of job {spec.job_name}, so that it is not "
                   f"pruned while it is copied")
        status = observed.status.replace(state=SnapshotState.PENDING,
                                          reason=SnapshotReason.HOLDING, message=message)
        hold = HoldCheckpoint(store=job.store, checkpoint_id=wanted, holder=observed.uid,
                              by=f"snapshot {observed.name}")
        return SnapshotPlan(actions=(hold,), status=_stamped(observed, status, now=now),
                            requeue_after=HOLD_SECONDS)
    source = chosen.path
    job_dir = source.rstrip("/").rsplit("/", 2)[0]
    target = snapshot_directory(job_dir.rsplit("/", 1)[0], snapshot_name=observed.name,
                                snapshot_uid=observed.uid)
    message = f"copying checkpoint {wanted} of job {spec.job_name} into {target}"
    status = observed.status.replace(
        state=SnapshotState.IN_PROGRESS, reason=SnapshotReason.COPYING, message=message,
        job_uid=job.uid, checkpoint_id=wanted, source=source, target=target,
        job_spec=dict(job.spec))
    pod = _take_pod(observed, status=status, job_name=spec.job_name)
    return SnapshotPlan(
        actions=(pod, EmitSnapshotEvent("Normal", SnapshotReason.COPYING, message)),
        status=_stamped(observed, status, now=now), requeue_after=POLL_SECONDS)


def _follow_copy(observed: SnapshotObserved, *, now: datetime) -> SnapshotPlan:
    status = observed.status
    spec = observed.spec
    assert spec is not None
    pod = observed.take_pod
    if pod is None:
        if status.job_spec is None or status.job_uid is None:
            return _fail(observed, reason=SnapshotReason.FAILED,
                         message="the job's spec was not recorded; apply the snapshot again",
                         now=now)
        return SnapshotPlan(actions=(_take_pod(observed, status=status, job_name=spec.job_name),),
                            status=_stamped(observed, status, now=now),
                            requeue_after=POLL_SECONDS)
    if pod.is_terminating or pod.is_live:
        return SnapshotPlan(actions=(), status=_stamped(observed, status, now=now),
                            requeue_after=POLL_SECONDS)
    outcome, problem = _outcome(pod, task=SnapshotTask.TAKE)
    if outcome is not None and outcome.succeeded:
        size = _size(outcome.size_bytes)
        message = (f"checkpoint {outcome.checkpoint_id} of job {spec.job_name} copied: "
                   f"{outcome.files} files, {size}, at {outcome.path}")
        done = status.replace(state=SnapshotState.COMPLETED, reason=SnapshotReason.COMPLETED,
                              message=message, path=outcome.path,
                              checkpoint_id=outcome.checkpoint_id, size_bytes=outcome.size_bytes,
                              files=outcome.files, completed_at=now)
        return SnapshotPlan(actions=(EmitSnapshotEvent("Normal", SnapshotReason.COMPLETED,
                                                       message),),
                            status=_stamped(observed, done, now=now))
    retriable = outcome is None or pod.exit_code == ExitCode.STORAGE_UNREACHABLE
    if retriable and status.failures + 1 < MAX_TRIES:
        message = (f"copy {status.failures + 1} of {MAX_TRIES} failed ({problem}); "
                   f"trying again")
        again = status.replace(failures=status.failures + 1, reason=SnapshotReason.RETRYING,
                               message=message)
        return SnapshotPlan(
            actions=(DeleteSnapshotPod(pod.name),
                     EmitSnapshotEvent("Warning", SnapshotReason.RETRYING, message)),
            status=_stamped(observed, again, now=now), requeue_after=POLL_SECONDS)
    return _fail(observed, reason=SnapshotReason.FAILED, message=problem, now=now)


def _plan_deletion(observed: SnapshotObserved) -> SnapshotPlan:
    status = observed.status
    take = observed.take_pod
    if take is not None and (take.is_live or take.is_terminating):
        # A copy still writing would leave files behind the disposal: stop it first.
        actions: tuple[SnapshotAction, ...] = () if take.is_terminating else (
            DeleteSnapshotPod(take.name),)
        return SnapshotPlan(actions=actions, status=status, requeue_after=POLL_SECONDS)
    dispose_on_delete = observed.spec.dispose_on_delete if observed.spec else True
    complete = status.state is SnapshotState.COMPLETED
    if status.target is None or (complete and not dispose_on_delete):
        actions = ()
        if complete:
            actions = (EmitSnapshotEvent("Normal", SnapshotReason.KEPT,
                                         f"disposeOnDelete is false: the snapshot stays at "
                                         f"{status.path}"),)
        return SnapshotPlan(actions=(*actions, ReleaseSnapshot()), status=status)
    if status.job_spec is None or status.job_uid is None or observed.spec is None:
        return _kept(status, "the job's spec was not recorded, so no pod can reach the storage")
    pod = observed.dispose_pod
    if pod is None:
        create = CreateSnapshotPod(
            name=snapshot_pod_name(observed.name, dispose=True), task=SnapshotTask.DISPOSE,
            target=status.target, job_name=observed.spec.job_name, job_uid=status.job_uid,
            job_spec=status.job_spec)
        return SnapshotPlan(actions=(create,), status=status, requeue_after=POLL_SECONDS)
    if pod.is_live or pod.is_terminating:
        return SnapshotPlan(actions=(), status=status, requeue_after=POLL_SECONDS)
    outcome, problem = _outcome(pod, task=SnapshotTask.DISPOSE)
    if outcome is None or not outcome.succeeded:
        return _kept(status, problem)
    message = f"deleted {outcome.files} files under {status.target}"
    return SnapshotPlan(actions=(EmitSnapshotEvent("Normal", SnapshotReason.DISPOSED, message),
                                 ReleaseSnapshot()), status=status)


def _kept(status: SnapshotStatus, problem: str) -> SnapshotPlan:
    message = f"the snapshot's files were kept at {status.target}: {problem}"
    return SnapshotPlan(actions=(EmitSnapshotEvent("Warning", SnapshotReason.KEPT, message),
                                 ReleaseSnapshot()), status=status)


def _outcome(pod: SnapshotPod, *, task: SnapshotTask) -> tuple[SnapshotOutcome | None, str]:
    """The pod's outcome, and the problem in words when it failed."""
    try:
        outcome = SnapshotOutcome.from_message(pod.message or "")
    except SnapshotOutcomeError:
        why = pod.reason or f"exit code {pod.exit_code}"
        tail = " ".join((pod.message or "").split())[-300:]
        return None, f"pod {pod.name} ended ({why}) without an outcome" + (
            f": {tail}" if tail else "")
    if outcome.task is not task:
        return None, f"pod {pod.name} reported a {outcome.task.value} outcome"
    return outcome, outcome.error or ""


def _take_pod(observed: SnapshotObserved, *, status: SnapshotStatus,
              job_name: str) -> CreateSnapshotPod:
    assert status.target and status.source and status.job_uid and status.job_spec is not None
    return CreateSnapshotPod(name=snapshot_pod_name(observed.name), task=SnapshotTask.TAKE,
                             target=status.target, job_name=job_name, job_uid=status.job_uid,
                             job_spec=status.job_spec, checkpoint=status.source)


def _pending(observed: SnapshotObserved, reason: SnapshotReason, message: str, *,
             now: datetime) -> SnapshotPlan:
    status = observed.status.replace(state=SnapshotState.PENDING, reason=reason, message=message)
    return SnapshotPlan(actions=(), status=_stamped(observed, status, now=now),
                        requeue_after=WAIT_SECONDS)


def _fail(observed: SnapshotObserved, *, reason: SnapshotReason, message: str,
          now: datetime) -> SnapshotPlan:
    status = observed.status.replace(state=SnapshotState.FAILED, reason=reason, message=message)
    return SnapshotPlan(actions=(EmitSnapshotEvent("Warning", reason, message),),
                        status=_stamped(observed, status, now=now))


def _stamped(observed: SnapshotObserved, status: SnapshotStatus, *,
             now: datetime) -> SnapshotStatus:
    """``status`` with its Ready condition and ``observedGeneration`` brought up to date."""
    ready = status.state is SnapshotState.COMPLETED
    conditions = set_condition(
        status.conditions, kind=ConditionType.READY,
        status=ConditionStatus.TRUE if ready else ConditionStatus.FALSE,
        reason=status.reason or "", message=status.message or "", now=now,
        observed_generation=observed.generation)
    return status.replace(conditions=conditions,
                          observed_generation=observed.generation)


def _size(size_bytes: int) -> str:
    if size_bytes < 1024:
        return f"{size_bytes} B"
    value = size_bytes / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
