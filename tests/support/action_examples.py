"""One action of every kind, for the tests that each executor carries out every kind.

``test_the_examples_cover_every_kind_of_action`` (in the operator's tests) fails when a
kind is added to :data:`~cjob_lifecycle.actions.Action` without an example here, so
the executors' tests cannot miss it.
"""

from __future__ import annotations

import typing

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
from cjob_spec.names import (
    checkpoint_configmap_name,
    cleanup_pod_name,
    driver_pod_name,
    driver_service_name,
    network_policy_name,
    role_binding_name,
    role_name,
    service_account_name,
    spark_auth_secret_name,
    standby_pod_name,
)
from cjob_spec.reasons import Reason
from cjob_spec.snapshot import SnapshotTrigger

IMAGE = "example.org/runtime:1"
KINDS: frozenset[type] = frozenset(typing.get_args(Action))
"""Every kind of action there is."""


def one_of_each(job_name: str) -> list[Action]:
    """An action of every kind for the job ``job_name``, in an order each can be carried
    out in (the standby exists before it is promoted)."""
    standby = standby_pod_name(job_name, 1)
    return [
        EnsureCheckpointConfigMap(name=checkpoint_configmap_name(job_name)),
        EnsureServiceAccount(name=service_account_name(job_name)),
        EnsureRole(name=role_name(job_name)),
        EnsureRoleBinding(name=role_binding_name(job_name)),
        EnsureService(name=driver_service_name(job_name)),
        EnsureNetworkPolicy(name=network_policy_name(job_name)),
        EnsureSparkAuthSecret(name=spark_auth_secret_name(job_name)),
        AdvanceFence(attempt=1),
        CreateDriver(name=driver_pod_name(job_name, 1), attempt=1, restore_pointer="latest",
                     image=IMAGE),
        CreateStandby(name=standby, attempt=1, image=IMAGE),
        RequestCheckpoint(pod=driver_pod_name(job_name, 1), nonce="n1"),
        AdvanceFence(attempt=2),
        PromoteStandby(name=standby, attempt=2, restore_pointer="latest"),
        DeleteDriver(name=driver_pod_name(job_name, 1), reason=Reason.SUPERSEDED),
        EmitEvent(type="Normal", reason=Reason.STARTED, message="started attempt 2"),
        DeleteExecutor(name=f"{job_name}-attempt-1-exec-1"),
        CreateCleanupPod(name=cleanup_pod_name(job_name), uris=("file:///ckpt/job-uid-1",),
                         image=IMAGE, deadline_seconds=600),
        DeleteCleanupPod(name=cleanup_pod_name(job_name)),
        CreateSnapshot(name=f"{job_name}-s-20260101000000", trigger=SnapshotTrigger.SCHEDULED),
        DeleteSnapshot(name=f"{job_name}-s-20250101000000"),
        RetainCheckpointStore(name=checkpoint_configmap_name(job_name),
                              message="checkpoint data under file:///ckpt/job-uid-1 kept"),
        DeleteCheckpointStore(name=checkpoint_configmap_name(job_name)),
        RemoveFinalizer(),
        RequeueAfter(seconds=5.0),
    ]
