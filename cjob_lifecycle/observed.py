"""A typed snapshot of everything ``plan`` needs to know about one CheckpointedJob.

Two backends fill it: the operator from the CR, its driver pods, its cleanup pod and
its checkpoint ConfigMap (``cjob_operator.observed`` reads pod manifests), and the
embedded runner from its local driver processes and its file store
(``cjob.local_backend``). A "pod" here is whatever runs one attempt's driver: the
decisions depend only on its phase, exit code and times, which both backends report
in the same terms. Tests build observations directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from cjob_checkpoint.store.restore_report import RestoreReport
from cjob_spec.driver_beacon import DriverLost
from cjob_spec.model import CheckpointedJob
from cjob_spec.snapshot import SnapshotState, SnapshotTrigger
from cjob_spec.standby_signal import StandbyPromotion
from cjob_spec.status import CheckpointRef, JobStatus

POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


class PodPhase:
    """What the decisions ask of any pod of the job: whether it may still run, has
    ended, or is being deleted (its subclasses hold ``phase`` and the timestamp)."""

    phase: str
    deletion_timestamp: datetime | None

    @property
    def is_live(self) -> bool:
        """Pending or Running: the process may still be running or about to."""
        return self.phase in ("Pending", "Running")

    @property
    def is_finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def is_terminating(self) -> bool:
        return self.deletion_timestamp is not None


@dataclass(frozen=True)
class DriverPod(PodPhase):
    """One driver pod of the job, reduced to what the decisions depend on.

    ``started_at`` is when the driver container started running; ``exit_code``,
    ``finished_at`` come from its terminated state. ``reason``/``message`` are the most
    telling explanation available: the terminated or waiting reason of the container
    (``OOMKilled``, ``ImagePullBackOff``) or the pod's own (``Evicted``).
    """

    name: str
    attempt: int
    phase: str
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    deletion_timestamp: datetime | None = None
    spec_hash: str | None = None
    standby: bool = False
    """A standby driver waiting to be promoted (``spec.standby``); ``attempt`` is the
    attempt during which it was created. A promoted one is an ordinary driver."""
    ready: bool = False
    """For a standby: its Spark is started and its job code loaded."""
    node_lost_since: datetime | None = None
    """Since when the pod's node has stopped reporting (its ``Ready`` condition is
    ``Unknown``): the pod still says Running, and would for minutes more (the
    cluster evicts it only after its tolerations run out), but nothing is known of
    its process. The store's fence keeps it from writing once a newer attempt runs."""


@dataclass(frozen=True)
class ExecutorPod(PodPhase):
    """An executor pod Spark created for one of the job's drivers.

    While the job runs, an executor the scheduler cannot place holds the barrier stage
    (it needs every slot at once): ``unschedulable_since`` and ``unschedulable_message``
    say since when and why (the scheduler's ``PodScheduled`` condition). While the job
    is deleted, an executor may still upload checkpoint data after its driver stopped
    (the garbage collector deletes it only then), so the data is deleted only once
    every executor has stopped too.
    """

    name: str
    phase: str
    deletion_timestamp: datetime | None = None
    attempt: int | None = None
    """The attempt of the driver that created it (its label), when it has one."""
    unschedulable_since: datetime | None = None
    unschedulable_message: str = ""


@dataclass(frozen=True)
class CleanupPod(PodPhase):
    """The pod deleting the job's checkpoint data, reduced to what deletion waits on.

    ``message`` is the container's termination message (the cleanup command's
    one-line outcome) or the pod's own explanation; ``exit_code`` is the command's.
    """

    name: str
    phase: str
    created_at: datetime
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    deletion_timestamp: datetime | None = None


class StoreOwnership(Enum):
    """Whose the checkpoint ConfigMap is, by its ``ownerReferences``."""

    THIS_JOB = "ThisJob"
    DELETED_JOB = "DeletedJob"
    """An earlier job of the same name: deleted, and the garbage collector has yet to
    delete its store. Waiting is enough."""
    OTHER = "Other"
    """No CheckpointedJob, or one of another name: left by an orphaning delete, made by
    hand, or copied. Its checkpoints are not this job's."""


@dataclass(frozen=True)
class StoreView:
    """What the operator sees of the checkpoint ConfigMap ``<job>-checkpoints``."""

    exists: bool = False
    ownership: StoreOwnership = StoreOwnership.THIS_JOB
    """Meaningful only when ``exists``."""
    latest: CheckpointRef | None = None
    """The newest completed checkpoint recorded in the store."""
    latest_attempt: int | None = None
    """The attempt whose driver committed ``latest`` (from its pointer); ``None`` when
    unknown. A Stateless upgrade tells the stopped spec's state from the new one's by it."""
    fence_attempt: int | None = None
    """The attempt currently allowed to write (``checkpointed.io/fence-attempt``)."""
    restore_report: RestoreReport | None = None
    """What a driver reported it restored (``checkpointed.io/restored``); it is about
    ``restore_report.attempt``, which may be an earlier attempt than the current one."""
    driver_lost: DriverLost | None = None
    """A standby's report that the driver of ``driver_lost.attempt`` is gone (its beacon
    connection closed without a goodbye, :mod:`cjob_spec.driver_beacon`)."""
    promotion: StandbyPromotion | None = None
    """The latest standby promotion the operator recorded (its first write of a
    promotion: a pass that stopped after it is resumed from it)."""

    @property
    def is_own(self) -> bool:
        """The store exists and is this job's: only then do its records describe the job."""
        return self.exists and self.ownership is StoreOwnership.THIS_JOB


@dataclass(frozen=True)
class JobSnapshot:
    """A CheckpointedJobSnapshot the operator took of the job by itself, as the schedule
    needs it (``spec.snapshots``)."""

    name: str
    trigger: SnapshotTrigger
    created_at: datetime
    state: SnapshotState | None = None


@dataclass(frozen=True)
class RestoreSnapshot:
    """The CheckpointedJobSnapshot ``spec.restore.snapshot`` names, as a fresh start
    needs it; ``state`` is ``None`` when there is no such snapshot."""

    name: str
    state: SnapshotState | None = None
    path: str | None = None
    """The copy's ``_metadata``, once Completed."""
    checkpoint_id: int | None = None
    job_name: str | None = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class MetricSample:
    """One reading of a running attempt's metrics."""

    at: datetime
    attempt: int
    records_in: float
    """The sources' records read so far (a counter: it only grows within an attempt)."""
    lag_records: float | None
    """Records the sources have yet to read (summed over partitions); None when the
    sources report none."""



@dataclass(frozen=True)
class Observed:
    """Everything ``plan`` decides on. ``status`` is the CR's current status."""

    job: CheckpointedJob
    status: JobStatus
    pods: tuple[DriverPod, ...] = ()
    executors: tuple[ExecutorPod, ...] = ()
    """The executor pods of the job's drivers; read only for a job whose deletion
    deletes its checkpoint data."""
    cleanup_pod: CleanupPod | None = None
    """The pod deleting the checkpoint data of a job being deleted, once there is one."""
    store: StoreView = StoreView()
    deleting: bool = False
    """The CR has a deletion timestamp: run the finalizer path."""
    default_image: str | None = None
    """The operator's runtime image, for a job without ``spec.image``."""
    raw_spec: Mapping[str, Any] | None = None
    """The job's spec as stored (the operator's; ``None`` from the embedded runner): what
    ``spec.rollback`` keeps of a spec that ran well."""
    snapshots: tuple[JobSnapshot, ...] = ()
    """The snapshots the operator took of the job by itself, read only when
    ``spec.snapshots`` asks for any."""
    scaling_samples: tuple[MetricSample, ...] = ()
    """With ``spec.autoscaler``: readings of the running driver's metrics, oldest first
    (the operator keeps the last few minutes of them)."""
    restore_snapshot: RestoreSnapshot | None = None
    """The snapshot ``spec.restore.snapshot`` names, read only while the job has no
    checkpoint of its own (a fresh start is the only one that restores it)."""

    @property
    def image(self) -> str | None:
        """The image the job's next driver runs; ``None`` when there is none to run."""
        return self.job.spec.image or self.default_image

    @property
    def generation(self) -> int:
        return self.job.metadata.generation

    @property
    def generation_observed(self) -> bool:
        return self.status.observed_generation == self.job.metadata.generation

    @property
    def suspend(self) -> bool:
        return self.job.spec.suspend

    @property
    def pending_trigger_nonce(self) -> str | None:
        """A manual checkpoint nonce not handled yet, if any."""
        nonce = self.job.spec.checkpoint.trigger_nonce
        return nonce if nonce and nonce != self.status.last_trigger_nonce else None

    @property
    def pending_redeploy_nonce(self) -> str | None:
        """A ``spec.restore.redeployNonce`` not acted on yet, if any."""
        nonce = self.job.spec.restore.redeploy_nonce
        return nonce if nonce and nonce != self.status.last_redeploy_nonce else None

    def pod(self, name: str | None) -> DriverPod | None:
        return next((pod for pod in self.pods if pod.name == name), None)
