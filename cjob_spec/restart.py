"""The restart-policy decision, shared by the operator and the embedded runner.

After a driver ends, its supervisor asks ``decide_restart`` what to do. The function is
pure (the current time is a parameter) so both supervisors behave identically and
every rule is testable with a table:

1. A clean exit (code 0) finishes the job, except under ``Always``, which restarts it.
   A driver that stopped for a suspend (code 8) that was withdrawn before it stopped
   is restarted at once, without counting a restart: nothing failed.
2. A permanent exit code (2 bad configuration, 3 user-code error, 6 restore failed;
   see ``cjob_spec.exit_codes``) gives up at once under ``OnFailure`` and ``Always``:
   restarting cannot fix it and would only hide the cause behind backoff delays.
3. ``Never`` finishes the job as failed on any failure.
4. Otherwise the job is restarted with exponential backoff
   ``initial * multiplier ** restarts`` capped at ``max``, unless ``maxRestarts``
   restarts were already spent. An attempt that ran for ``resetAfter`` before failing
   was healthy: the count starts from zero again, so a long-running job that fails
   once a day is never given up on.

The delay is measured from the failure, not from when the decision is made, so a
supervisor that notices a failure late does not wait longer than it should.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cjob_spec.exit_codes import ExitCode, describe_exit, is_permanent, reason_for_exit
from cjob_spec.model import RestartPolicy, RestartPolicyType
from cjob_spec.reasons import PodReason, Reason
from cjob_spec.times import to_utc


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt ended, as observed by its supervisor.

    ``exit_code`` is ``None`` when the driver vanished without one (pod deleted, node
    lost, start timeout); such ends are always treated as transient. ``reason`` is the
    lifecycle's, or the one Kubernetes gave for the pod when it says more.
    """

    reason: Reason | PodReason
    exit_code: int | None
    at: datetime
    message: str = ""

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0

    @property
    def suspended(self) -> bool:
        """The driver stopped for a suspend, its final checkpoint committed."""
        return self.exit_code == ExitCode.SUSPENDED


PERMANENT_REASONS: frozenset[Reason | PodReason] = frozenset({Reason.EXECUTORS_UNSCHEDULABLE})
"""Ends without an exit code that a restart cannot fix (the same executors would wait
for the same missing capacity)."""


@dataclass(frozen=True)
class Restart:
    """Start a new attempt ``delay_seconds`` after the failure (at ``not_before``)."""

    delay_seconds: float
    restarts: int
    """The restart count including this restart (shown in ``status.restarts``)."""
    not_before: datetime
    reason: Reason | PodReason
    message: str

    def remaining_seconds(self, *, now: datetime) -> float:
        return max(0.0, (to_utc(self.not_before) - to_utc(now)).total_seconds())


@dataclass(frozen=True)
class GiveUp:
    """Do not restart: the job has failed."""

    reason: Reason | PodReason
    message: str


@dataclass(frozen=True)
class Finish:
    """The job is over without a restart: succeeded, or failed under ``Never``."""

    succeeded: bool
    reason: Reason | PodReason
    message: str


RestartDecision = Restart | GiveUp | Finish


def backoff_seconds(policy: RestartPolicy, *, restarts: int) -> float:
    """Delay before the restart that follows ``restarts`` earlier restarts."""
    backoff = policy.backoff
    cap = backoff.max.seconds
    delay = backoff.initial.seconds
    for _ in range(restarts):
        delay *= backoff.multiplier
        if delay >= cap:
            return cap
    return min(delay, cap)


def effective_restarts(
    policy: RestartPolicy, *, restarts: int, healthy_since: datetime | None, ended_at: datetime
) -> int:
    """The restart count after applying the reset window to an attempt that just ended."""
    if healthy_since is None:
        return restarts
    healthy_for = (to_utc(ended_at) - to_utc(healthy_since)).total_seconds()
    return 0 if healthy_for >= policy.reset_after.seconds else restarts


def decide_restart(
    *,
    policy: RestartPolicy,
    end: AttemptEnd,
    restarts: int,
    healthy_since: datetime | None,
    now: datetime,
) -> RestartDecision:
    """Decide what follows the end of an attempt (see the module docstring for rules).

    ``restarts`` is the count so far (``status.restarts``); ``healthy_since`` is when
    the ended attempt started running (``None`` if it never did). ``now`` is only used
    to guard against clocks: the failure time is never taken to be in the future.
    """
    ended_at = min(to_utc(end.at), to_utc(now))
    what = end.message or describe_exit(end.exit_code)
    if end.suspended:
        return Restart(delay_seconds=0.0, restarts=restarts, not_before=ended_at,
                       reason=Reason.RESUMED,
                       message="the driver stopped for a suspend that was withdrawn; "
                               "starting again from its final checkpoint")
    if end.succeeded:
        if policy.type is not RestartPolicyType.ALWAYS:
            return Finish(succeeded=True, reason=Reason.SUCCEEDED, message="the job finished")
    elif is_permanent(end.exit_code) and policy.type is not RestartPolicyType.NEVER:
        return GiveUp(
            reason=reason_for_exit(end.exit_code),
            message=f"{what}; this failure is permanent, not restarting",
        )
    elif end.reason in PERMANENT_REASONS and policy.type is not RestartPolicyType.NEVER:
        return GiveUp(reason=end.reason,
                      message=f"{what}; this failure is permanent, not restarting")
    elif policy.type is RestartPolicyType.NEVER:
        return Finish(
            succeeded=False,
            reason=end.reason,
            message=f"{what}; restart policy is Never",
        )
    count = effective_restarts(
        policy, restarts=restarts, healthy_since=healthy_since, ended_at=ended_at
    )
    if count >= policy.max_restarts:
        return GiveUp(
            reason=Reason.RESTART_LIMIT_EXCEEDED,
            message=f"{what}; gave up after {count} restart(s) (maxRestarts {policy.max_restarts})",
        )
    delay = backoff_seconds(policy, restarts=count)
    return Restart(
        delay_seconds=delay,
        restarts=count + 1,
        not_before=ended_at + timedelta(seconds=delay),
        reason=end.reason,
        message=f"{what}; restart {count + 1} of at most {policy.max_restarts} in {delay:g}s",
    )
