"""The finalizer path of a job being deleted: stop every driver, then delete its data if asked.

The data is deleted by a cleanup pod in the job's namespace, which has what the
operator deliberately lacks: the job's volumes and, through the kubelet, its S3
credentials. A deletion is never held forever: the data is kept, and a
``CheckpointsRetained`` Warning says where and why, when the cleanup cannot succeed.
"""

from __future__ import annotations

from datetime import timedelta

from cjob_lifecycle.actions import (
    CreateCleanupPod,
    DeleteCheckpointStore,
    DeleteCleanupPod,
    RemoveFinalizer,
)
from cjob_lifecycle.observed import CleanupPod
from cjob_lifecycle.plan.draft import Draft
from cjob_lifecycle.plan.failures import NO_IMAGE_MESSAGE
from cjob_lifecycle.plan.pods import wait_for_blocking_pods
from cjob_spec.exit_codes import describe_exit
from cjob_spec.model import CheckpointCleanup
from cjob_spec.names import checkpoint_configmap_name, cleanup_pod_name, job_checkpoint_dir
from cjob_spec.reasons import Reason
from cjob_spec.times import to_utc


def plan_deletion(draft: Draft) -> None:
    """Stop every driver, then delete the checkpoint data if the job asks for it.

    The finalizer goes once the cleanup pod succeeded, or with a
    ``CheckpointsRetained`` Warning once it failed or overran its deadline.
    """
    if wait_for_blocking_pods(draft, Reason.JOB_DELETED, standby_too=True):
        draft.set(reason=Reason.TERMINATING, message="waiting for the driver pods to stop")
        return
    job = draft.job
    uid = job.metadata.uid
    if job.spec.cleanup_policy.checkpoints is not CheckpointCleanup.DELETE or not uid:
        draft.act(RemoveFinalizer())
        return
    uri = job_checkpoint_dir(job.spec.checkpoint.storage, job_name=draft.name, job_uid=uid)
    pod = draft.observed.cleanup_pod
    if pod is None:
        _start_cleanup(draft, uri)
        return
    if pod.phase == "Succeeded":
        draft.act(DeleteCheckpointStore(name=checkpoint_configmap_name(draft.name)))
        done = f": {pod.message}" if pod.message else ""
        draft.event("Normal", Reason.CHECKPOINTS_DELETED,
                    f"cleanup pod {pod.name} deleted the checkpoint data under {uri}{done}")
        draft.act(RemoveFinalizer())
        return
    problem = _cleanup_problem(draft, pod)
    if problem is None:
        draft.set(reason=Reason.DELETING_CHECKPOINTS,
                  message=f"waiting for cleanup pod {pod.name} to delete {uri}")
        draft.requeue_in(draft.settings.poll_seconds)
        return
    if pod.is_live and not pod.is_terminating:
        draft.act(DeleteCleanupPod(name=pod.name))
    _retain(draft, uri, problem)


def _start_cleanup(draft: Draft, uri: str) -> None:
    image = draft.observed.image
    if image is None:
        _retain(draft, uri, f"there is no image to run the cleanup pod ({NO_IMAGE_MESSAGE})")
        return
    name = cleanup_pod_name(draft.name)
    draft.act(CreateCleanupPod(name=name, uri=uri, image=image,
                               deadline_seconds=draft.settings.cleanup_deadline_seconds))
    message = f"cleanup pod {name} deletes the checkpoint data under {uri}"
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


def _retain(draft: Draft, uri: str, why: str) -> None:
    """Keep the data, say where it is and why, and let the job go."""
    draft.event(
        "Warning",
        Reason.CHECKPOINTS_RETAINED,
        f"checkpoint data under {uri} kept: {why}; delete it with the job's credentials",
    )
    draft.act(RemoveFinalizer())
