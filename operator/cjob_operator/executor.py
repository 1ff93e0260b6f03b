"""Carrying out a plan's actions against the Kubernetes API, in order.

Every kind of :data:`~cjob_lifecycle.actions.Action` has its case in
:meth:`ActionExecutor.execute_one`, and the type checker proves there is one for each:
an action added to the lifecycle and forgotten here is a type error, not a decision
silently dropped. The execution stops at the first failing action (every action is
idempotent, so the next pass simply redoes what is still needed).

Events are the exception: an Event that cannot be posted is logged and skipped,
because losing a message must never stop a job's recovery.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import assert_never

from cjob_lifecycle.actions import (
    Action,
    AdvanceFence,
    CreateCleanupPod,
    CreateDriver,
    CreateSnapshot,
    CreateStandby,
    DeleteCheckpointStore,
    DeleteCleanupPod,
    DeleteDriver,
    DeleteExecutor,
    DeleteSnapshot,
    EmitEvent,
    EnsureCheckpointConfigMap,
    EnsureNetworkPolicy,
    EnsureRole,
    EnsureRoleBinding,
    EnsureService,
    EnsureServiceAccount,
    EnsureSparkAuthSecret,
    PromoteStandby,
    RemoveFinalizer,
    RequestCheckpoint,
    RequeueAfter,
    RetainCheckpointStore,
)
from cjob_operator.builders.companions import (
    SPARK_AUTH_SECRET_BYTES,
    build_driver_service,
    build_network_policy,
    build_role,
    build_role_binding,
    build_service_account,
    build_spark_auth_secret,
)
from cjob_operator.builders.metadata import (
    COMPONENT_CHECKPOINT_STORE,
    owner_reference,
    standard_labels,
)
from cjob_operator.builders.pods import build_cleanup_pod, build_driver_pod, build_standby_pod
from cjob_operator.builders.snapshot_pods import build_job_snapshot
from cjob_operator.cluster import Cluster, ClusterError, JobRef, Manifest
from cjob_operator.config import OperatorConfig
from cjob_spec.model import CheckpointedJob
from cjob_spec.names import ROLE_DRIVER, checkpoint_configmap_name
from cjob_spec.standby_signal import StandbyPromotion

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExecutionReport:
    executed: tuple[Action, ...]
    error: ClusterError | None = None
    failed_action: Action | None = None

    @property
    def finalized(self) -> bool:
        return self.error is None and any(isinstance(a, RemoveFinalizer) for a in self.executed)


class ActionExecutor:
    """Carries out a plan's actions against a :class:`Cluster`, in order.

    A job's companions (ServiceAccount, Role, RoleBinding, Service, Secret,
    NetworkPolicy) are ensured at every attempt's start; sending an unchanged one
    again costs a create that answers "already exists" and a patch that changes
    nothing, seven requests per restart. So an object this executor ensured with the
    same manifest (same owner, hence the same job) less than ``reuse_seconds`` ago
    is not sent again; after that it is, so one deleted by hand comes back, and at
    once after any failed call for the job.
    """

    def __init__(self, *, cluster: Cluster, operator_config: OperatorConfig,
                 reuse_seconds: float) -> None:
        self.cluster = cluster
        self.operator_config = operator_config
        self.reuse_seconds = reuse_seconds
        self._ensured: dict[tuple[str, str], dict[tuple[str, str], tuple[bytes, float]]] = {}

    def _ensure(self, job: CheckpointedJob, manifest: Manifest, *,
                same_as: Manifest | None = None) -> None:
        """Create or update ``manifest`` unless it was ensured unchanged lately.

        ``same_as`` is what decides "unchanged" when it differs from what is sent
        (a Secret's random key is not part of its identity).
        """
        metadata = manifest.get("metadata") or {}
        ensured = self._ensured.setdefault((job.metadata.namespace, job.metadata.name), {})
        key = (str(manifest.get("kind")), str(metadata.get("name")))
        fingerprint = hashlib.sha256(json.dumps(
            same_as if same_as is not None else manifest, sort_keys=True, default=str
        ).encode()).digest()
        previous = ensured.get(key)
        now = time.monotonic()
        if previous is not None and previous[0] == fingerprint \
                and now - previous[1] < self.reuse_seconds:
            return
        self.cluster.ensure_object(manifest=manifest)
        ensured[key] = (fingerprint, now)

    def forget(self, *, namespace: str, name: str) -> None:
        """Forget what was ensured for the job ``namespace/name`` (it is gone)."""
        self._ensured.pop((namespace, name), None)

    def execute(self, actions: Iterable[Action], *, job: CheckpointedJob) -> ExecutionReport:
        executed: list[Action] = []
        for action in actions:
            try:
                self.execute_one(action, job=job)
            except ClusterError as exc:
                # A refused call may come from a companion deleted by hand (a pod whose
                # ServiceAccount is gone): the next pass sends them all again.
                self.forget(namespace=job.metadata.namespace, name=job.metadata.name)
                return ExecutionReport(executed=tuple(executed), error=exc, failed_action=action)
            executed.append(action)
        return ExecutionReport(executed=tuple(executed))

    def execute_one(self, action: Action, *, job: CheckpointedJob) -> None:
        cluster = self.cluster
        namespace = job.metadata.namespace
        name = job.metadata.name
        config = self.operator_config
        match action:
            case EnsureCheckpointConfigMap():
                cluster.ensure_checkpoint_configmap(
                    namespace=namespace,
                    name=action.name,
                    job_name=name,
                    owner_reference=owner_reference(job),
                    labels=standard_labels(job, component=COMPONENT_CHECKPOINT_STORE),
                )
            case EnsureServiceAccount():
                self._ensure(job, build_service_account(job))
            case EnsureRole():
                self._ensure(job, build_role(job))
            case EnsureRoleBinding():
                self._ensure(job, build_role_binding(job))
            case EnsureService():
                self._ensure(job, build_driver_service(job, operator_config=config))
            case EnsureSparkAuthSecret():
                key = secrets.token_bytes(SPARK_AUTH_SECRET_BYTES)
                secret = build_spark_auth_secret(job, key=key)
                self._ensure(job, secret,
                             same_as={k: v for k, v in secret.items() if k != "data"})
            case EnsureNetworkPolicy():
                self._ensure(job, build_network_policy(job, operator_config=config))
            case AdvanceFence():
                cluster.advance_fence(
                    namespace=namespace, name=checkpoint_configmap_name(name),
                    attempt=action.attempt,
                )
            case CreateDriver():
                manifest = build_driver_pod(
                    job,
                    attempt=action.attempt,
                    restore_pointer=action.restore_pointer,
                    restore_exact=action.restore_exact,
                    image=action.image,
                    operator_config=config,
                )
                cluster.create_pod(manifest=manifest)
            case CreateStandby():
                cluster.create_pod(manifest=build_standby_pod(
                    job, attempt=action.attempt, image=action.image, operator_config=config))
            case PromoteStandby():
                cluster.promote_standby(
                    namespace=namespace, store=checkpoint_configmap_name(name), role=ROLE_DRIVER,
                    promotion=StandbyPromotion(attempt=action.attempt,
                                               restore=action.restore_pointer, pod=action.name))
            case DeleteDriver():
                cluster.delete_pod(namespace=namespace, name=action.name, force=action.force)
            case RequestCheckpoint():
                cluster.request_checkpoint(
                    namespace=namespace, name=checkpoint_configmap_name(name), nonce=action.nonce
                )
            case EmitEvent():
                post_event(self.cluster, ref=job_ref(job), event=action)
            case DeleteExecutor():
                cluster.delete_pod(namespace=namespace, name=action.name, force=False)
            case CreateCleanupPod():
                cluster.create_pod(manifest=build_cleanup_pod(
                    job, uris=action.uris, image=action.image,
                    deadline_seconds=action.deadline_seconds, operator_config=config,
                ))
            case DeleteCleanupPod():
                cluster.delete_pod(namespace=namespace, name=action.name, force=False)
            case DeleteCheckpointStore():
                cluster.delete_configmap(namespace=namespace, name=action.name)
            case RetainCheckpointStore():
                cluster.retain_configmap(namespace=namespace, name=action.name,
                                         message=action.message)
            case CreateSnapshot():
                cluster.create_snapshot(manifest=build_job_snapshot(
                    job, name=action.name, trigger=action.trigger,
                    checkpoint_id=action.checkpoint_id))
            case DeleteSnapshot():
                cluster.delete_snapshot(namespace=namespace, name=action.name)
            case RemoveFinalizer() | RequeueAfter():
                pass  # carried out by the caller (kopf removes its finalizer, the loop waits)
            case _:
                assert_never(action)


def job_ref(job: CheckpointedJob) -> JobRef:
    return JobRef(namespace=job.metadata.namespace, name=job.metadata.name, uid=job.metadata.uid)


def post_event(cluster: Cluster, *, ref: JobRef, event: EmitEvent) -> None:
    """Post ``event`` on the job; one that cannot be posted is logged, never raised."""
    try:
        cluster.post_event(job=ref, type=event.type, reason=event.reason, message=event.message)
    except ClusterError as exc:
        _log.warning("%s/%s: event %s not posted: %s", ref.namespace, ref.name, event.reason, exc)
