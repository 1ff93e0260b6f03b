"""The standby driver (``spec.standby``): keeping one ready, and its word that the driver is lost.

A standby has Spark started and the job's code loaded, so it takes over an attempt
in the time a promotion takes. It belongs to no attempt and writes nothing until it is
promoted, which fences the attempt before it. Its report that the active driver is
gone (:mod:`cjob_spec.driver_beacon`) arrives about a second before the kubelet's,
and may end the attempt first, but only where the standby then takes over.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from cjob_lifecycle.actions import CreateStandby
from cjob_lifecycle.observed import DriverPod
from cjob_lifecycle.plan.draft import Draft
from cjob_lifecycle.plan.failures import restart_decision
from cjob_lifecycle.plan.pods import delete, delete_finished
from cjob_spec.driver_beacon import DriverLost
from cjob_spec.exit_codes import ExitCode, describe_exit
from cjob_spec.model import spec_hash
from cjob_spec.names import standby_pod_name
from cjob_spec.reasons import Reason
from cjob_spec.restart import AttemptEnd, Restart
from cjob_spec.standby_signal import StandbyPromotion
from cjob_spec.status import Phase
from cjob_spec.times import to_utc


def promotion_in_flight(draft: Draft) -> tuple[DriverPod, StandbyPromotion] | None:
    """A promotion the operator began and did not see through: the pod it promoted, and
    the promotion, to be finished with the same attempt.

    A promotion is three writes: the fence and the promotion on the store, the pod's
    labels, the job's status. A pass that stopped after the first (the relabel
    refused, the operator killed, the status write lost) leaves the store naming a pod
    and an attempt that the status does not know yet. Promoting anew would take
    attempt n+2 and fence out the standby that took n+1 already; deleting the pod as
    another attempt's would lose the takeover. So such a pod is the next attempt's
    driver, whatever its labels say, as long as it still runs."""
    store = draft.observed.store
    promotion = store.promotion if store.is_own else None
    if (promotion is None or promotion.pod is None or promotion.attempt != store.fence_attempt
            or promotion.attempt <= draft.status.attempt):
        return None
    pod = draft.observed.pod(promotion.pod)
    if (pod is None or not pod.is_live or pod.is_terminating or pod.name in draft.deleted
            or pod.spec_hash != spec_hash(draft.job)):
        return None
    if not pod.standby and pod.attempt != promotion.attempt:
        return None
    return pod, promotion


def ready_standby(draft: Draft) -> DriverPod | None:
    """A standby driver that can take the next attempt now: running, ready, not being
    stopped, and started for the current spec (an outdated one would run old code).
    One already promoted by a pass that did not finish comes first."""
    if not draft.job.spec.standby.enabled:
        return None
    in_flight = promotion_in_flight(draft)
    if in_flight is not None:
        return in_flight[0]
    current = spec_hash(draft.job)
    ready = [pod for pod in draft.observed.pods
             if pod.standby and pod.ready and pod.phase == "Running" and not pod.is_terminating
             and pod.node_lost_since is None and pod.name not in draft.deleted
             and pod.spec_hash == current]
    return max(ready, key=lambda pod: pod.attempt) if ready else None


def manage_standby(draft: Draft) -> None:
    """Keep one standby driver while the job is active and asks for one; stop the rest.

    A standby is started for the spec of its time: after a spec change it is replaced,
    as is one that exited. The one promoted in this pass is the attempt's driver now.
    While the job restarts, the standby it has is kept (not started anew): it takes
    over once ready, at the end of the backoff or as soon as the old driver is gone.
    """
    phase = draft.status.phase
    restarting = phase is Phase.RESTARTING
    wanted = (draft.job.spec.standby.enabled
              and phase in (Phase.PENDING, Phase.RUNNING, Phase.RESTARTING))
    current = spec_hash(draft.job)
    keep: DriverPod | None = None
    retry_in = 0.0
    for pod in draft.observed.pods:
        if not pod.standby or pod.name == draft.promoted:
            continue
        usable = (pod.is_live and not pod.is_terminating and pod.spec_hash == current
                  and pod.node_lost_since is None)
        if wanted and usable and keep is None:
            keep = pod
        elif pod.is_live:
            delete(draft, pod,
                   Reason.STANDBY_NOT_NEEDED if not wanted
                   else Reason.NODE_LOST if pod.node_lost_since is not None
                   else Reason.STANDBY_OUTDATED)
        elif wanted and pod.phase == "Failed" and pod.finished_at is not None and (
                wait := draft.settings.standby_retry_seconds
                - draft.seconds_since(pod.finished_at)) > 0:
            retry_in = max(retry_in, wait)
        else:
            if pod.phase == "Failed" and not pod.is_terminating and pod.name not in draft.deleted:
                why = f": {pod.message}" if pod.message else ""
                draft.event("Warning", Reason.STANDBY_FAILED, f"standby driver {pod.name} failed, "
                            f"{describe_exit(pod.exit_code)}{why}; a new one is started")
            delete_finished(draft, pod)
    if restarting:
        return
    image = draft.image
    if wanted and keep is None and retry_in > 0:
        draft.requeue_in(retry_in)
    elif wanted and keep is None and image is not None:
        name = standby_pod_name(draft.name, draft.status.attempt)
        if draft.observed.pod(name) is None:
            draft.act(CreateStandby(name=name, attempt=draft.status.attempt, image=image))
        else:
            draft.requeue_in(draft.settings.poll_seconds)  # its old pod goes first


def _standby_report(draft: Draft) -> tuple[DriverPod, DriverLost] | None:
    """The ready standby, if it reports the current attempt's driver gone."""
    store = draft.observed.store
    report = store.driver_lost if store.is_own else None
    standby = ready_standby(draft)
    if (report is None or standby is None or report.pod != standby.name
            or report.attempt != draft.status.attempt):
        return None
    # A report is about a moment. It stays on the ConfigMap after the plan let it pass
    # (the policy would not restart then), and must not act later, over a driver that
    # has run on all along: past the grace the kubelet would have reported a real end.
    if draft.seconds_since(_report_time(report)) > draft.settings.kill_grace_seconds:
        return None
    return standby, report


def _report_time(report: DriverLost) -> datetime:
    return datetime.fromtimestamp(report.at, tz=UTC)


def reported_lost(draft: Draft, pod: DriverPod) -> AttemptEnd | None:
    """The end of an attempt whose driver the ready standby reports gone.

    A driver's connection to its standby closes the moment its process dies, about a
    second before the kubelet reports the container's end. The report may be false (a
    network fault), so it is acted on only to let the standby take over, which fences
    the old driver first: where the policy would not restart (``Never``, or
    ``maxRestarts`` spent), the kubelet's report, with its exit code, decides.
    """
    found = _standby_report(draft)
    if found is None:
        return None
    standby, report = found
    end = AttemptEnd(
        reason=Reason.DRIVER_LOST,
        exit_code=None,
        at=min(_report_time(report), draft.now),
        message=f"driver pod {pod.name} is lost, as standby driver {standby.name} "
                f"reports: {report.detail}",
    )
    return end if isinstance(restart_decision(draft, pod, end), Restart) else None


def lost_to_standby(draft: Draft) -> frozenset[str]:
    """Driver pods the ready standby reports lost. They neither hold back its promotion,
    which fences them first, nor are they deleted: a crashed driver's pod ends by
    itself, with its logs and exit code (see ``attempts.clean_up_other_attempts``)."""
    found = _standby_report(draft)
    if found is None:
        return frozenset()
    _, report = found
    return frozenset(pod.name for pod in draft.observed.pods
                     if not pod.standby and pod.attempt == report.attempt)


def left_to_end(draft: Draft, pod: DriverPod) -> bool:
    """Whether ``pod`` is the driver a standby reported lost, still within the grace its
    container has to be seen ending; past it, it still runs (a false report): stopped."""
    failure = draft.status.last_failure
    if (failure is None or failure.reason != Reason.DRIVER_LOST
            or failure.attempt != pod.attempt):
        return False
    deadline = to_utc(failure.at) + timedelta(seconds=draft.settings.kill_grace_seconds)
    if draft.now >= deadline:
        return False
    draft.requeue_at(deadline)
    return True


def complete_lost_driver_failure(draft: Draft) -> None:
    """Add the kubelet's word to the ``lastFailure`` of a driver a standby reported lost.

    The standby's report comes first and knows only that the connection closed; what
    ended the process (``OOMKilled``, exit code 137) is on the pod once the kubelet
    sees it, and belongs where a user looks for why the job restarted. A driver that
    ends ``FENCED`` was alive until the takeover (packet loss, not a death, closed the
    connection): the report was false, and the takeover gives its restart back, so
    a flaky network cannot spend ``maxRestarts``.
    """
    failure = draft.status.last_failure
    if (failure is None or failure.reason != Reason.DRIVER_LOST
            or failure.exit_code is not None or failure.attempt is None):
        return
    for pod in draft.observed.pods:
        if (pod.standby or pod.attempt != failure.attempt or pod.phase != "Failed"
                or pod.exit_code is None):
            continue
        detail = describe_exit(pod.exit_code)
        if pod.reason:
            detail = f"{pod.reason}, {detail}"
        message = f"{failure.message}; its pod then failed: {detail}"
        if pod.exit_code == ExitCode.FENCED:
            restarts = max(0, draft.status.restarts - 1)
            message = (f"{failure.message}; the report was false: the driver was alive until "
                       f"the takeover fenced it ({detail})")
            draft.set(restarts=restarts)
            draft.event("Warning", Reason.FALSE_DRIVER_LOST,
                        f"driver pod {pod.name} was still running when a standby reported it "
                        f"lost, and stopped only when the takeover fenced it: the takeover is "
                        f"not counted against maxRestarts ({restarts} restarts counted)")
        draft.set(last_failure=dataclasses.replace(
            failure, exit_code=pod.exit_code, message=message))
        return
