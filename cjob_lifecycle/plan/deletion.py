"""The finalizer path of a job being deleted: stop every pod, then delete its data if asked.

The data is deleted by a cleanup pod in the job's namespace, which has what the
operator deliberately lacks: the job's volumes and, through the kubelet, its S3
credentials. It deletes every storage root the job used, and the checkpoint
ConfigMap, the index of that data, goes only after it reported them verifiably empty.
A deletion is never held forever: when the cleanup cannot succeed, the data and its
index are kept, and a ``CheckpointsRetained`` Warning says where and why.
"""

from __future__ import annotations

from datetime import timedelta

from cjob_lifecycle.actions import (
    Action,
    CreateCleanupPod,
    DeleteCheckpointStore,
    DeleteCleanupPod,
    DeleteExecutor,
    EmitEvent,
    RemoveFinalizer,
    RetainCheckpointStore,
)
from cjob_lifecycle.observed import CleanupPod
from cjob_lifecycle.plan.draft import Draft
from cjob_lifecycle.plan.failures import NO_IMAGE_MESSAGE
from cjob_lifecycle.plan.pods import is_blocking, wait_for_blocking_pods
from cjob_spec.exit_codes import describe_exit
from cjob_spec.model import CheckpointCleanup
from cjob_spec.names import checkpoint_configmap_name, cleanup_pod_name
from cjob_spec.reasons import Reason
from cjob_spec.times import to_utc


def plan_deletion(draft: Draft) -> None:
    """Stop every pod of the job, then delete its checkpoint data if the job asks for it.

    The data goes only once no pod of the job can write it: its drivers and standby,
    and their executors, which the garbage collector deletes only after their driver
    and which may upload meanwhile. The finalizer goes once the cleanup pod succeeded,
    or with a ``CheckpointsRetained`` Warning once it failed or overran its deadline.
    """
    drivers_left = wait_for_blocking_pods(draft, Reason.JOB_DELETED, standby_too=True)
    job = draft.job
    uid = job.metadata.uid
    if job.spec.cleanup_policy.checkpoints is not CheckpointCleanup.DELETE or not uid:
        if drivers_left:
            draft.set(reason=Reason.TERMINATING, message="waiting for the driver pods to stop")
        else:
            draft.act(RemoveFinalizer())
        return
    executors_left = _stop_executors(draft)
    if drivers_left or executors_left:
        waiting = ["the driver pods"] if drivers_left else []
        if executors_left:
            waiting.append(f"{executors_left} executor pod{'s' if executors_left > 1 else ''}")
        draft.set(reason=Reason.TERMINATING,
                  message=f"waiting for {' and '.join(waiting)} to stop before deleting "
                          f"the checkpoint data")
        draft.requeue_in(draft.settings.poll_seconds)
        return
    uris = storage_roots(draft)
    where = ", ".join(uris)
    pod = draft.observed.cleanup_pod
    if pod is None:
        _start_cleanup(draft, uris)
        return
    if pod.phase == "Succeeded":
        draft.act(DeleteCheckpointStore(name=checkpoint_configmap_name(draft.name)))
        done = f": {pod.message}" if pod.message else ""
        draft.event("Normal", Reason.CHECKPOINTS_DELETED,
                    f"cleanup pod {pod.name} deleted the checkpoint data under {where}{done}")
        draft.act(RemoveFinalizer())
        return
    problem = _cleanup_problem(draft, pod)
    if problem is None:
        draft.set(reason=Reason.DELETING_CHECKPOINTS,
                  message=f"waiting for cleanup pod {pod.name} to delete {where}")
        draft.requeue_in(draft.settings.poll_seconds)
        return
    if pod.is_live and not pod.is_terminating:
        draft.act(DeleteCleanupPod(name=pod.name))
    _retain(draft, where, problem)


def storage_roots(draft: Draft) -> tuple[str, ...]:
    """Every checkpoint directory of the job: those its attempts were started with,
    then the current spec's (a status from before roots were recorded has none)."""
    current = () if draft.storage_root is None else (draft.storage_root,)
    return tuple(dict.fromkeys((*draft.status.storage_roots, *current)))


def _stop_executors(draft: Draft) -> int:
    """Delete the executors still running; how many may still write.

    Like a driver, an executor blocks until it has stopped, its node is gone (phase
    ``Unknown``) or it outlived its deletion by ``kill_grace_seconds``: a pod that
    only looks like an executor cannot hold the deletion for longer.
    """
    blocking = 0
    for pod in draft.observed.executors:
        if (pod.is_live or pod.phase == "Unknown") and not pod.is_terminating:
            draft.act(DeleteExecutor(name=pod.name))
        if is_blocking(draft, pod):
            blocking += 1
    return blocking


def _start_cleanup(draft: Draft, uris: tuple[str, ...]) -> None:
    where = ", ".join(uris)
    image = draft.image
    if image is None:
        _retain(draft, where, f"there is no image to run the cleanup pod ({NO_IMAGE_MESSAGE})")
        return
    name = cleanup_pod_name(draft.name)
    draft.act(CreateCleanupPod(name=name, uris=uris, image=image,
                               deadline_seconds=draft.settings.cleanup_deadline_seconds))
    message = f"cleanup pod {name} deletes the checkpoint data under {where}"
    if draft.status.reason != Reason.DELETING_CHECKPOINTS:
        draft.event("Normal", Reason.DELETING_CHECKPOINTS, message)
    draft.set(reason=Reason.DELETING_CHECKPOINTS, message=message)
    draft.requeue_in(draft.settings.poll_seconds)


def _cleanup_problem(draft: Draft, pod: CleanupPod) -> str | None:
    """Why the cleanup pod will not succeed, or ``None`` while it still may."""
    detail = f": {pod.message}" if pod.message else ""
    if pod.phase == "Failed":
        return f"cleanup pod {pod.name} failed, {describe_exit(pod.exit_code)}{detail}"
    if pod.phase == "Unknown":
        return f"the node of cleanup pod {pod.name} stopped reporting (phase Unknown)"
    if pod.is_terminating:
        return f"cleanup pod {pod.name} was deleted before it finished"
    settings = draft.settings
    deadline = to_utc(pod.created_at) + timedelta(
        seconds=settings.cleanup_deadline_seconds + settings.kill_grace_seconds
    )
    if draft.now >= deadline:
        waiting = f" ({pod.reason}{detail})" if pod.reason else ""
        return (f"cleanup pod {pod.name} did not finish within "
                f"{settings.cleanup_deadline_seconds}s{waiting}")
    draft.requeue_at(deadline)
    return None


def _retain(draft: Draft, where: str, why: str) -> None:
    """Keep the data and its index, say where both are and why, and let the job go."""
    for action in retention(job_name=draft.name, where=where, why=why,
                            store_is_own=draft.observed.store.is_own):
        draft.act(action)


def retention(*, job_name: str, where: str, why: str, store_is_own: bool) -> list[Action]:
    """What keeping a deleted job's data takes: its index (the checkpoint ConfigMap, if
    the job's own) kept, a ``CheckpointsRetained`` Warning that says where both are and
    why, and the finalizer removed, in that order (the garbage collector deletes what
    the job still owns once it is gone)."""
    store = checkpoint_configmap_name(job_name)
    actions: list[Action] = []
    index = ""
    if store_is_own:
        actions.append(RetainCheckpointStore(
            name=store, message=f"checkpoint data under {where} kept: {why}"))
        index = (f"; its index, ConfigMap {store}, is kept too (no longer owned by the job): "
                 f"delete it once the data is gone")
    actions.append(EmitEvent(
        type="Warning", reason=Reason.CHECKPOINTS_RETAINED,
        message=f"checkpoint data under {where} kept: {why}; delete it with the job's "
                f"credentials{index}"))
    actions.append(RemoveFinalizer())
    return actions
