"""What every object the operator creates for a job carries: its labels and its owner.

Every object carries the standard labels and a controller owner reference to the
CheckpointedJob, so ``kubectl get all -l checkpointed.io/job=<name>`` finds them and
Kubernetes garbage-collects them with the job.
"""

from __future__ import annotations

from typing import Any

from cjob_spec.errors import SpecError
from cjob_spec.model import CheckpointedJob
from cjob_spec.names import (
    API_VERSION,
    APP_NAME,
    KIND,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MANAGED_BY,
)

Manifest = dict[str, Any]

COMPONENT_CHECKPOINT_STORE = "checkpoint-store"
COMPONENT_SPARK_AUTH = "spark-auth"
COMPONENT_NETWORK_POLICY = "network-policy"
"""Components (``app.kubernetes.io/component``) of objects that are not the driver's;
the driver's pods and the objects it runs with are of component ``driver``."""


def standard_labels(job: CheckpointedJob, *, component: str) -> dict[str, str]:
    return {
        LABEL_NAME: APP_NAME,
        LABEL_INSTANCE: job.metadata.name,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: component,
        LABEL_JOB: job.metadata.name,
    }


def owner_reference(job: CheckpointedJob) -> dict[str, Any]:
    uid = job.metadata.uid
    if not uid:
        raise SpecError(field="metadata.uid", problem="is required to own objects")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": job.metadata.name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_metadata(
    job: CheckpointedJob,
    *,
    name: str,
    component: str,
    extra_labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = standard_labels(job, component=component)
    labels.update(extra_labels or {})
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": job.metadata.namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(job)],
    }
    if annotations:
        metadata["annotations"] = annotations
    return metadata
