"""What the reconciliation glue needs from the Kubernetes API, as a protocol.

``cjob_operator.api.KubeCluster`` implements it against a real API server; tests use
a recording fake. Keeping the protocol free of the Kubernetes client keeps every
module but ``api`` importable (and testable) without it, and the import-linter
contract in ``pyproject.toml`` holds the line.

Every method is idempotent: creating what exists or deleting what is gone succeeds.
Failures raise :class:`ClusterError` (or :class:`StatusConflictError`), never the
client's own exception types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from cjob_checkpoint.store.configmap_layout import StoreOwner
from cjob_checkpoint.store.holds import CheckpointHolds
from cjob_checkpoint.store.restore_report import RestoreReport
from cjob_spec.driver_beacon import DriverLost
from cjob_spec.names import KIND
from cjob_spec.standby_signal import StandbyPromotion
from cjob_spec.status import CheckpointRef

Manifest = dict[str, Any]


class ClusterError(Exception):
    """An API call failed.

    ``retryable`` is False when trying again cannot help (the request was refused as
    invalid or forbidden); the reconciler still retries, but more slowly.
    """

    def __init__(self, *, operation: str, cause: str, retryable: bool = True) -> None:
        super().__init__(operation, cause, retryable)
        self.operation = operation
        self.cause = cause
        self.retryable = retryable

    def __str__(self) -> str:
        return f"could not {self.operation}: {self.cause}"


class StatusConflictError(ClusterError):
    """The job's status changed under us (another writer); plan again from a fresh read."""

    def __init__(self, *, namespace: str, name: str) -> None:
        super().__init__(
            operation=f"write the status of {namespace}/{name}",
            cause="the status was changed by someone else since it was read",
        )
        self.namespace = namespace
        self.name = name


@dataclass(frozen=True)
class JobRef:
    """The object an Event is about: a CheckpointedJob, or (``kind``) a snapshot of one."""

    namespace: str
    name: str
    uid: str | None = None
    resource_version: str | None = None
    kind: str = KIND


@dataclass(frozen=True)
class StoreReading:
    """What the operator reads from a job's checkpoint ConfigMap."""

    fence_attempt: int
    latest: CheckpointRef | None
    size_bytes: int
    owners: tuple[StoreOwner, ...]
    """The CheckpointedJobs that own the ConfigMap (its ``ownerReferences``)."""
    restore_report: RestoreReport | None = None
    """What the driver of ``restore_report.attempt`` says it restored."""
    driver_lost: DriverLost | None = None
    """A standby's report that the active driver is gone."""
    promotion: StandbyPromotion | None = None
    """The operator's latest standby promotion recorded on the store."""
    checkpoints: tuple[CheckpointRef, ...] = ()
    """Every retained checkpoint (live pointers), oldest first; ``latest`` is the last."""
    holds: CheckpointHolds = field(default_factory=CheckpointHolds)
    """Who keeps which of them from being pruned (snapshots copying them)."""
    latest_attempt: int | None = None
    """The attempt whose driver committed ``latest``."""


class Cluster(Protocol):
    def read_snapshot(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A CheckpointedJobSnapshot (the one ``spec.restore.snapshot`` names)."""

    def list_snapshots(self, *, namespace: str,
                       labels: Mapping[str, str]) -> list[Mapping[str, Any]]:
        """The CheckpointedJobSnapshots carrying ``labels``."""

    def create_snapshot(self, *, manifest: Manifest) -> None:
        """Create a CheckpointedJobSnapshot; AlreadyExists is success."""

    def delete_snapshot(self, *, namespace: str, name: str) -> None:
        """Delete a CheckpointedJobSnapshot; NotFound is success."""

    def read_job(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The CheckpointedJob as the API server has it now, or None if it is gone."""

    def write_status(
        self,
        *,
        job: Mapping[str, Any],
        status: Mapping[str, Any],
    ) -> Mapping[str, Any] | None:
        """Replace ``job``'s status with ``status``; the job as written, if known.

        ``job`` is the object as read; the write is a compare-and-swap on its
        ``resourceVersion``. A conflict caused by others changing only spec or
        metadata is retried; a conflict on the status raises
        :class:`StatusConflictError`. The object returned (the API server's answer)
        lets the next pass plan from it without reading the job again.
        """

    def read_store(self, *, namespace: str, name: str) -> StoreReading | None:
        """The checkpoint ConfigMap ``name``, or None if it does not exist."""

    def ensure_checkpoint_configmap(
        self,
        *,
        namespace: str,
        name: str,
        job_name: str,
        owner_reference: Mapping[str, Any],
        labels: Mapping[str, str],
    ) -> None:
        """Create the empty store if it is missing (an existing one is never changed)."""

    def ensure_object(self, *, manifest: Manifest) -> None:
        """Create a ServiceAccount, Role, RoleBinding, Service or NetworkPolicy, or bring
        it up to date."""

    def advance_fence(self, *, namespace: str, name: str, attempt: int) -> None:
        """Make ``attempt`` the only attempt allowed to write to the store ``name``."""

    def create_pod(self, *, manifest: Manifest) -> None:
        """Create a pod; AlreadyExists is success."""

    def read_pod(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The pod as the API server has it now, or None if there is none."""

    def read_node(self, *, name: str) -> Mapping[str, Any] | None:
        """The Node ``name`` (where a driver runs), or None if there is none."""

    def delete_pod(self, *, namespace: str, name: str, force: bool) -> None:
        """Delete a pod (grace period 0 when ``force``); NotFound is success."""

    def list_pods(self, *, namespace: str, labels: Mapping[str, str]) -> list[Mapping[str, Any]]:
        """The pods of ``namespace`` that carry every label in ``labels``, as the API
        server has them now."""

    def hold_checkpoint(self, *, namespace: str, store: str, checkpoint_id: int, holder: str,
                        by: str) -> bool:
        """Keep checkpoint ``checkpoint_id`` in the store ``store`` from being pruned until
        ``holder`` releases it; ``False`` when it is no longer retained."""

    def release_checkpoint(self, *, namespace: str, store: str, holder: str) -> None:
        """Let go of ``holder``'s hold in ``store``; nothing held (or no store) is fine."""

    def request_checkpoint(self, *, namespace: str, name: str, nonce: str) -> None:
        """Ask the driver using the store ``name`` for one checkpoint tagged ``nonce``."""

    def promote_standby(self, *, namespace: str, store: str, promotion: StandbyPromotion,
                        role: str) -> None:
        """Promote the standby pod ``promotion.pod``: record ``promotion`` on the store
        ``store`` (the standby watches it), then label the pod with its new attempt and
        ``role``, so it is observed, selected and listed as that attempt's driver.

        Both steps are idempotent; if the second fails, the next pass promotes again."""

    def post_event(self, *, job: JobRef, type: str, reason: str, message: str) -> None:
        """Record a Kubernetes Event about ``job``."""

    def delete_configmap(self, *, namespace: str, name: str) -> None:
        """Delete a ConfigMap; NotFound is success."""

    def retain_configmap(self, *, namespace: str, name: str, message: str) -> None:
        """Keep a ConfigMap after its owner is deleted: drop its owner references and
        annotate it with ``message`` (``ANNOTATION_RETAINED``); NotFound is success."""
