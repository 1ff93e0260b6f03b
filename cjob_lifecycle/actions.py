"""What the operator may do to the world, as plain values.

``plan`` returns these; one module of the operator executes them in order against the
API server. Keeping them as data makes the decision logic testable without a cluster
and makes every side effect visible in one list. Executing an action must be
idempotent: the same plan may be carried out twice if a status update is lost.
Order matters where it says so: the fence is advanced before the driver of the new
attempt is created, so an older attempt can never write to the store afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cjob_spec.reasons import PodReason, Reason
from cjob_spec.snapshot import SnapshotTrigger

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class EnsureCheckpointConfigMap:
    """Create the checkpoint metadata ConfigMap if it does not exist (never overwrite)."""

    name: str


@dataclass(frozen=True)
class EnsureServiceAccount:
    name: str


@dataclass(frozen=True)
class EnsureRole:
    """Create or update the driver's Role (least privilege, see ``builders.build_role``)."""

    name: str


@dataclass(frozen=True)
class EnsureRoleBinding:
    name: str


@dataclass(frozen=True)
class EnsureService:
    """Create the driver's headless Service (Spark on Kubernetes only)."""

    name: str


@dataclass(frozen=True)
class EnsureNetworkPolicy:
    """Create or update the NetworkPolicy admitting only the job's own pods (see
    ``builders.build_network_policy``); skipped when the operator runs without them."""

    name: str


@dataclass(frozen=True)
class EnsureSparkAuthSecret:
    """Create, if missing, the Secret that Spark's RPC authenticates with (k8s master;
    see ``builders.build_spark_auth_secret``). An existing one is kept as it is."""

    name: str


@dataclass(frozen=True)
class AdvanceFence:
    """Set the checkpoint ConfigMap's fence to ``attempt`` (never lower it).

    From then on the store refuses writes from older attempts, so a driver that is
    still alive on a lost node cannot commit a checkpoint over the new attempt's.
    """

    attempt: int


@dataclass(frozen=True)
class CreateDriver:
    """Create driver pod ``name`` for ``attempt``, restoring from ``restore_pointer``.

    ``image`` runs the driver (and, with Spark on Kubernetes, the executors): the
    job's ``spec.image``, or the operator's runtime image. An AlreadyExists answer is
    success (the name is deterministic).
    """

    name: str
    attempt: int
    restore_pointer: str
    image: str
    restore_exact: bool = False
    """A redeploy's attempt: the driver restores ``restore_pointer`` even when the store
    holds newer checkpoints (whose state the redeploy discards)."""


@dataclass(frozen=True)
class CreateStandby:
    """Start standby driver ``name``: Spark started, the job's code loaded, waiting.

    It belongs to no attempt and never writes to the store until it is promoted
    (``PromoteStandby``); the name is deterministic, so creating it twice is harmless.
    ``attempt`` is the attempt running when it is started.
    """

    name: str
    attempt: int
    image: str


@dataclass(frozen=True)
class PromoteStandby:
    """Make standby driver ``name`` the driver of ``attempt``, restoring ``restore_pointer``.

    Comes after the ``AdvanceFence`` to ``attempt``, like a ``CreateDriver``: the driver
    it replaces, if still alive, can no longer commit. Promoting a standby that was
    already promoted to the same attempt changes nothing.
    """

    name: str
    attempt: int
    restore_pointer: str


@dataclass(frozen=True)
class DeleteDriver:
    """Delete a driver pod; ``force`` means grace period 0 (its node is lost)."""

    name: str
    reason: Reason | PodReason
    force: bool = False


@dataclass(frozen=True)
class RequestCheckpoint:
    """Ask the running driver ``pod`` to take one checkpoint now, tagged ``nonce``."""

    pod: str
    nonce: str


@dataclass(frozen=True)
class EmitEvent:
    """Post an Event on the job, with the lifecycle's reason or, passed on, the pod's."""

    type: EventType
    reason: Reason | PodReason
    message: str


@dataclass(frozen=True)
class DeleteExecutor:
    """Delete an executor pod of a job being deleted, which may still upload checkpoint
    data (its driver is gone, and the garbage collector has yet to delete it)."""

    name: str


@dataclass(frozen=True)
class CreateCleanupPod:
    """Create pod ``name`` running ``image`` to delete the job's checkpoint directories
    ``uris`` (``<storage>/<job>-<uid>``, one per storage the job used), stopped by the
    kubelet after ``deadline_seconds``.

    The pod, not the operator, reaches the storage: it mounts the job's volumes and
    gets the S3 credentials from the job's Secret through the kubelet. AlreadyExists
    is success (the name is deterministic).
    """

    name: str
    uris: tuple[str, ...]
    image: str
    deadline_seconds: int


@dataclass(frozen=True)
class DeleteCleanupPod:
    """Delete a cleanup pod that overran its deadline, so it cannot delete data later
    than the operator said it was kept."""

    name: str


@dataclass(frozen=True)
class CreateSnapshot:
    """Create the CheckpointedJobSnapshot ``name`` of the job (of checkpoint
    ``checkpoint_id``, else of its latest), labelled with the job and ``trigger``. It is
    not owned by the job: it outlives it. AlreadyExists is success."""

    name: str
    trigger: SnapshotTrigger
    checkpoint_id: int | None = None


@dataclass(frozen=True)
class DeleteSnapshot:
    """Delete the CheckpointedJobSnapshot ``name`` (pruned by ``spec.snapshots``); its
    copy goes with it (``disposeOnDelete``)."""

    name: str


@dataclass(frozen=True)
class DeleteCheckpointStore:
    """Delete the checkpoint ConfigMap ``name`` (its data is gone, nothing to point at)."""

    name: str


@dataclass(frozen=True)
class RetainCheckpointStore:
    """Keep the checkpoint ConfigMap ``name`` after the job is gone: the data it indexes
    could not be deleted. Its owner reference to the job is removed (the garbage
    collector would delete it with the job) and ``message`` says what was kept and why."""

    name: str
    message: str


@dataclass(frozen=True)
class RemoveFinalizer:
    """Deletion is complete: let the CheckpointedJob go."""


@dataclass(frozen=True)
class RequeueAfter:
    """Look at the job again after ``seconds`` even if nothing changes."""

    seconds: float


Action = (
    EnsureCheckpointConfigMap
    | EnsureServiceAccount
    | EnsureRole
    | EnsureRoleBinding
    | EnsureService
    | EnsureNetworkPolicy
    | EnsureSparkAuthSecret
    | AdvanceFence
    | CreateDriver
    | CreateStandby
    | PromoteStandby
    | DeleteDriver
    | RequestCheckpoint
    | EmitEvent
    | DeleteExecutor
    | CreateCleanupPod
    | DeleteCleanupPod
    | CreateSnapshot
    | DeleteSnapshot
    | DeleteCheckpointStore
    | RetainCheckpointStore
    | RemoveFinalizer
    | RequeueAfter
)
