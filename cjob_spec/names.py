"""Names, labels and annotation keys that several components must agree on.

The operator creates objects with these names, the runtime reads and writes the
checkpoint ConfigMap, tests look objects up by them. Keeping them in one place is what
makes them a contract.
"""

from __future__ import annotations

import re

API_GROUP = "checkpointed.io"
API_VERSION = "checkpointed.io/v1alpha1"
KIND = "CheckpointedJob"
PLURAL = "checkpointedjobs"
SNAPSHOT_KIND = "CheckpointedJobSnapshot"
SNAPSHOT_PLURAL = "checkpointedjobsnapshots"
MAX_JOB_NAME_LENGTH = 40
"""Job names end up in Service names (63 characters) and in Spark's executor pod name
prefix (47 characters) together with the attempt number."""

LABEL_JOB = "checkpointed.io/job"
LABEL_ATTEMPT = "checkpointed.io/attempt"
LABEL_ROLE = "checkpointed.io/role"
ROLE_DRIVER = "driver"
"""The role label of the driver pod of an attempt (and the component of its companions)."""
ROLE_STANDBY = "standby"
"""The role label of a warm standby driver pod, until it is promoted (then ``driver``)."""
ROLE_EXECUTOR = "executor"
"""The role label Spark's executor pods get from the driver's settings."""
ROLE_CLEANUP = "cleanup"
"""The role label of the pod that deletes a deleted job's checkpoint data."""
ROLE_SNAPSHOT = "snapshot"
"""The role label of a pod that takes, or disposes of, a CheckpointedJobSnapshot."""
ROLE_STATE = "state"
"""The role label of the short-lived pod ``kubectl cjob state`` reads a checkpoint with."""
LABEL_SNAPSHOT = "checkpointed.io/snapshot"
"""On a snapshot pod: the CheckpointedJobSnapshot it works for."""
LABEL_SNAPSHOT_TRIGGER = "checkpointed.io/snapshot-trigger"
"""On a CheckpointedJobSnapshot the operator took by itself (``spec.snapshots``): why
(``Scheduled``, ``Upgrade``); with ``checkpointed.io/job``, whose."""

DRIVER_CONTAINER = "driver"
"""The container of a driver pod (and of a standby one) that runs the runtime."""
CLEANUP_CONTAINER = "cleanup"
"""The container of the cleanup pod."""
SNAPSHOT_CONTAINER = "snapshot"
"""The container of a snapshot pod."""
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
"""Spark's own name for the executor container, kept in the executors' pod template."""
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
MANAGED_BY = "checkpointed-jobs"
APP_NAME = "checkpointed-job"

ANNOTATION_SPEC_HASH = "checkpointed.io/spec-hash"
"""On the driver pod: hash of the spec the attempt runs (see ``spec_hash``)."""
ANNOTATION_RESTORE = "checkpointed.io/restore-pointer"
"""On the driver pod: the ``--restore`` value the attempt was started with."""
ANNOTATION_EXECUTOR_POD_TEMPLATE = "checkpointed.io/executor-pod-template"
"""On a driver pod with Spark on Kubernetes: the executors' pod template (YAML), which
the pod mounts as a file for ``spark.kubernetes.executor.podTemplateFile``."""
ANNOTATION_FENCE = "checkpointed.io/fence-attempt"
"""On the checkpoint ConfigMap: the only attempt allowed to write to the store."""
ANNOTATION_RETAINED = "checkpointed.io/retained"
"""On a checkpoint ConfigMap that outlived its deleted job: what data it indexes was
kept, and why (the job's ``cleanupPolicy.checkpoints: Delete`` could not delete it)."""

CONFIGMAP_COUNTER_KEY = "counter"
CONFIGMAP_CHECKPOINT_KEY_FORMAT = "checkpointID-%019d"
"""A checkpoint's pointer: its ConfigMap key, and its file name in the file store."""
CHECKPOINT_POINTER_NAME = re.compile(r"^checkpointID-(\d{19})$")
"""Matches a pointer's key or file name; group 1 is the checkpoint id."""


def job_selector(job_name: str) -> str:
    """The label selector of every pod of job ``job_name`` (drivers, standbys, executors,
    the cleanup pod): the scale subresource's ``status.selector``, for autoscalers."""
    return f"{LABEL_JOB}={job_name}"


def driver_pod_name(job_name: str, attempt: int) -> str:
    return f"{job_name}-attempt-{attempt}"


def standby_pod_name(job_name: str, attempt: int) -> str:
    """The standby driver started while ``attempt`` runs (the next one's, if promoted)."""
    return f"{job_name}-standby-{attempt}"


def driver_service_name(job_name: str) -> str:
    return f"{job_name}-driver"


def service_account_name(job_name: str) -> str:
    return f"{job_name}-driver"


def role_name(job_name: str) -> str:
    return f"{job_name}-driver"


def role_binding_name(job_name: str) -> str:
    return f"{job_name}-driver"


def network_policy_name(job_name: str) -> str:
    return f"{job_name}-pods"


def cleanup_pod_name(job_name: str) -> str:
    """The pod that deletes a deleted job's checkpoint data (``cleanupPolicy`` Delete)."""
    return f"{job_name}-cleanup"


def snapshot_pod_name(snapshot_name: str, *, dispose: bool = False) -> str:
    """The pod that copies a checkpoint into snapshot ``snapshot_name``, or that deletes
    the copy (``dispose``) when the snapshot is deleted with ``disposeOnDelete``."""
    return f"{snapshot_name}-{'dispose' if dispose else 'take'}"


def scheduled_snapshot_name(job_name: str, *, stamp: str) -> str:
    """A periodic snapshot of a job, ``stamp`` its UTC time as ``YYYYMMDDHHMMSS``."""
    return f"{job_name}-s-{stamp}"


def upgrade_snapshot_name(job_name: str, *, generation: int) -> str:
    """The snapshot of the final checkpoint before the job's spec ``generation`` ran."""
    return f"{job_name}-u-{generation}"


SNAPSHOTS_DIR = "snapshots"
"""Below a job's checkpoint storage, where its snapshots are kept: beside, never
inside, its checkpoint directory, so deleting the job's checkpoints leaves them."""


def snapshot_directory(storage: str, *, snapshot_name: str, snapshot_uid: str) -> str:
    """Where snapshot ``snapshot_name`` keeps its copy:
    ``<storage>/snapshots/<snapshot>-<uid>`` (the copy's ``_metadata`` is below it at
    ``<job>-<job uid>/chk-<id>/_metadata``, the layout every restore reads)."""
    return f"{storage.rstrip('/')}/{SNAPSHOTS_DIR}/{snapshot_name}-{snapshot_uid}"


def spark_auth_secret_name(job_name: str) -> str:
    return f"{job_name}-spark-auth"


def checkpoint_configmap_name(job_name: str) -> str:
    return f"{job_name}-checkpoints"


def executor_pod_name_prefix(job_name: str, attempt: int) -> str:
    """Spark executor pod name prefix; job names are at most 40 characters for this."""
    return f"{job_name}-{attempt}"


def standby_executor_pod_name_prefix(job_name: str, attempt: int) -> str:
    """The executors' prefix of the standby driver started while ``attempt`` runs: its
    own, because it runs beside that attempt's driver and its executors."""
    return f"{job_name}-s{attempt}"


def job_checkpoint_dir(storage: str, *, job_name: str, job_uid: str) -> str:
    """The directory of one job's checkpoints: ``<root>/<job>-<uid>``."""
    return f"{storage.rstrip('/')}/{job_name}-{job_uid}"


SUSPEND_PREFIX = "suspend-"
"""The nonces of the manual checkpoint requests that suspend an attempt (see
``cjob_checkpoint.store.triggers``): the attempt's driver stops after that checkpoint."""


def suspend_nonce(attempt: int) -> str:
    """The nonce of the request that suspends ``attempt``: its driver stops after it."""
    return f"{SUSPEND_PREFIX}{attempt}"


def suspended_attempt(nonce: str) -> int | None:
    """The attempt a suspend request names; ``None`` for an ordinary request."""
    number = nonce.removeprefix(SUSPEND_PREFIX)
    if number == nonce or not number.isdigit():
        return None
    return int(number)
