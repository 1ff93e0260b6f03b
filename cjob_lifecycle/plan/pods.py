"""The job's driver pods: which one is the attempt's, which still block, deleting them.

Two drivers of one job must never write at once. The fence keeps an older one from
committing, but a new driver is still not started beside a live one: a pod blocks
until it has stopped, or until its node is gone (phase ``Unknown``) or it outlived its
deletion by ``kill_grace_seconds``. A pod is deleted at most once per pass, for the
first reason found, so the actions name every pod once.
"""

from __future__ import annotations

from cjob_lifecycle.actions import DeleteDriver
from cjob_lifecycle.observed import DriverPod, PodPhase
from cjob_lifecycle.plan.draft import Draft
from cjob_spec.names import driver_pod_name
from cjob_spec.reasons import PodReason, Reason


def current_pod(draft: Draft) -> DriverPod | None:
    status = draft.status
    if status.attempt < 1:
        return None
    return draft.observed.pod(status.driver_pod or driver_pod_name(draft.name, status.attempt))


def is_blocking(draft: Draft, pod: PodPhase) -> bool:
    """Whether ``pod`` may still be running a driver (or an executor) that the next
    attempt, or the deletion of the job's data, must not overlap.

    Pods in phase Unknown, or on a node that stopped reporting, never block (their
    node is gone; the next attempt's fence stops them should they come back);
    terminating pods stop blocking ``kill_grace_seconds`` after their deletion deadline.
    """
    if not pod.is_live:
        return False
    if isinstance(pod, DriverPod) and pod.node_lost_since is not None:
        return False
    if pod.deletion_timestamp is None:
        return True
    return draft.seconds_since(pod.deletion_timestamp) < draft.settings.kill_grace_seconds


def delete(draft: Draft, pod: DriverPod, reason: Reason | PodReason) -> None:
    """Delete a driver pod that may still run, once per pass (the first reason wins).

    A pod whose node is gone is deleted at once (grace period 0), even one already
    terminating: no kubelet is left to finish a graceful deletion, and the object
    would stay until the node came back."""
    lost = pod.phase == "Unknown" or pod.node_lost_since is not None
    if (pod.is_terminating and not lost) or pod.is_finished or pod.name in draft.deleted:
        return
    draft.deleted.add(pod.name)
    draft.act(DeleteDriver(name=pod.name, reason=reason, force=lost))


def delete_finished(draft: Draft, pod: DriverPod, *,
                    reason: Reason = Reason.PRUNED_HISTORY) -> None:
    """Delete a finished driver pod: it is kept only for its logs."""
    if not pod.is_terminating and pod.name not in draft.deleted:
        draft.deleted.add(pod.name)
        draft.act(DeleteDriver(name=pod.name, reason=reason))


def wait_for_blocking_pods(draft: Draft, reason: Reason, *, standby_too: bool = False,
                           unless: frozenset[str] = frozenset(), wait: bool = True) -> bool:
    """Delete live driver pods; True (and a requeue) if some must still be waited for.

    A standby driver never overlaps an attempt (it writes nothing until promoted, and
    its promotion fences the attempt before it), so only the job's deletion waits for it.
    Pods named in ``unless`` are neither deleted nor waited for; with ``wait`` False the
    others are deleted but not waited for.
    """
    pods = [pod for pod in draft.observed.pods
            if (standby_too or not pod.standby) and pod.name not in unless]
    blocking = [pod for pod in pods if is_blocking(draft, pod)]
    for pod in pods:
        if pod.is_live or pod.phase == "Unknown":
            delete(draft, pod, reason)
    if blocking and wait:
        draft.requeue_in(draft.settings.poll_seconds)
        return True
    return False
