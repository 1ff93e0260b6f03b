"""The plan of one pass while it is being made, and the plan it becomes.

Every part of the decision writes into one :class:`Draft`: the actions so far, the
status so far and the moments the job must be looked at again. Parts never return
actions of their own, so their order in :func:`~cjob_lifecycle.plan.plan` is the
only order there is, and an action asked for twice in a pass is carried out once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from cjob_lifecycle.actions import Action, EmitEvent, EventType, RequeueAfter
from cjob_lifecycle.observed import Observed
from cjob_spec.model import CheckpointedJob
from cjob_spec.names import job_checkpoint_dir
from cjob_spec.reasons import PodReason, Reason
from cjob_spec.status import JobStatus
from cjob_spec.times import to_utc

_A = TypeVar("_A")


@dataclass(frozen=True)
class PlanSettings:
    """Timing knobs of the operator (not of the job)."""

    pod_appear_grace_seconds: float = 30.0
    """A just-created driver pod missing from the observation for less than this is
    assumed to be in flight (watch caches lag), not lost."""
    kill_grace_seconds: float = 30.0
    """A pod still terminating this long after its deletion deadline no longer blocks
    the next attempt (its node is probably gone; the fence keeps it harmless)."""
    poll_seconds: float = 5.0
    """Requeue delay while waiting for something that emits no event of its own."""
    standby_retry_seconds: float = 60.0
    """A standby driver that failed is replaced this long after it ended, not at once:
    one that cannot start (a refused watch, a bad image) would otherwise start a JVM
    every few seconds. The failed pod is kept meanwhile, for its logs."""
    resync_seconds: float = 60.0
    """Longest time between two passes over a job that is not finished."""
    keep_finished_attempts: int = 3
    """Finished driver pods kept for their logs (older ones are deleted)."""
    cleanup_deadline_seconds: int = 600
    """How long the cleanup pod of a deleted job may run (its ``activeDeadlineSeconds``);
    a pod not finished ``kill_grace_seconds`` after that keeps the data."""
    network_policies: bool = True
    """Give each job a NetworkPolicy admitting only its own pods (``--no-network-policies``
    turns it off, for clusters that manage policies themselves)."""


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    status: JobStatus
    job: CheckpointedJob | None = None
    """The job the plan decided for, whose spec the actions' pods run: the job itself,
    or a rolled-back job's stable spec (:mod:`~cjob_lifecycle.plan.rollback`)."""

    @property
    def requeue_after(self) -> float | None:
        return next(
            (action.seconds for action in self.actions if isinstance(action, RequeueAfter)), None
        )

    def of_type(self, kind: type[_A]) -> list[_A]:
        return [action for action in self.actions if isinstance(action, kind)]


class Draft:
    """The plan being built during one pass."""

    def __init__(self, observed: Observed, now: datetime, settings: PlanSettings) -> None:
        self.observed = observed
        self.job: CheckpointedJob = observed.job
        self.now = to_utc(now)
        self.settings = settings
        self.status = observed.status
        self.actions: list[Action] = []
        self.deadlines: list[datetime] = []
        self.deleted: set[str] = set()
        """Driver pods deleted in this pass: each is deleted once, for the first reason."""
        self.promoted: str | None = None
        """The standby driver promoted in this pass: the attempt's driver from now on."""

    def act(self, action: Action) -> None:
        if action not in self.actions:
            self.actions.append(action)

    def event(self, kind: EventType, reason: Reason | PodReason, message: str) -> None:
        self.act(EmitEvent(type=kind, reason=reason, message=message))

    def requeue_at(self, moment: datetime) -> None:
        self.deadlines.append(to_utc(moment))

    def requeue_in(self, seconds: float) -> None:
        self.deadlines.append(self.now + timedelta(seconds=seconds))

    def set(self, **changes: object) -> None:
        self.status = self.status.replace(**changes)

    @property
    def name(self) -> str:
        return self.job.metadata.name

    @property
    def image(self) -> str | None:
        """The image the job's next pod runs (the spec it runs may be a rolled-back
        job's stable one, :mod:`~cjob_lifecycle.plan.rollback`); ``None``: none to run."""
        return self.job.spec.image or self.observed.default_image

    @property
    def storage_root(self) -> str | None:
        """The checkpoint directory the job's spec names now (``<storage>/<job>-<uid>``);
        ``None`` for a job without a uid (a document never stored)."""
        uid = self.job.metadata.uid
        if not uid:
            return None
        return job_checkpoint_dir(self.job.spec.checkpoint.storage, job_name=self.name,
                                  job_uid=uid)

    def seconds_since(self, moment: datetime) -> float:
        return (self.now - to_utc(moment)).total_seconds()

    def build(self) -> Plan:
        actions = list(self.actions)
        if self.deadlines:
            delay = max(0.0, (min(self.deadlines) - self.now).total_seconds())
            actions.append(RequeueAfter(seconds=round(delay, 3)))
        return Plan(actions=tuple(actions), status=self.status, job=self.job)
