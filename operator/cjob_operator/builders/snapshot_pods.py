"""The pods that take and dispose of a CheckpointedJobSnapshot, and the snapshots the
operator takes of a job by itself.

Built as the job's cleanup pod is (:func:`~cjob_operator.builders.pods.build_cleanup_pod`):
the job's image, security contexts and placement, the volumes that hold its ``file://``
checkpoint storage (no others), and its S3 environment with the credentials as
``secretKeyRef``, so the operator reads no Secret and mounts no volume. They need no API access and run without a service account token. Their
outcome is the container's termination message (a ``SnapshotOutcome``).

They belong to the snapshot, not to the job: the snapshot object is their owner (the
garbage collector deletes them with it), and they carry no job label, so nothing
that counts a job's pods (its scale selector, its deletion) counts them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from cjob_operator.builders.metadata import Manifest
from cjob_operator.builders.pods import (
    TERMINATION_LOG,
    driver_pod_placement,
    storage_container,
)
from cjob_operator.config import OperatorConfig
from cjob_spec.model import CheckpointedJob
from cjob_spec.names import (
    API_VERSION,
    APP_NAME,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_ROLE,
    LABEL_SNAPSHOT,
    LABEL_SNAPSHOT_TRIGGER,
    MANAGED_BY,
    ROLE_SNAPSHOT,
    SNAPSHOT_CONTAINER,
    SNAPSHOT_KIND,
)
from cjob_spec.runtime_args import kubelet_literal
from cjob_spec.security import pod_security_context
from cjob_spec.snapshot import SnapshotTrigger
from cjob_spec.snapshot_outcome import SnapshotTask

DEADLINE_SECONDS = 3600
"""The kubelet stops a snapshot pod after this long: a copy of a large state through a
slow link may take minutes, never an hour."""


def storage_mounts(job: CheckpointedJob, uris: list[str]) -> list[Mapping[str, Any]]:
    """The job's volume mounts holding the ``file://`` directories among ``uris`` (none
    for S3): a snapshot pod mounts no more, so a volume it does not need (the job's
    code in a ConfigMap since deleted, say) can never keep it from starting."""
    found: list[Mapping[str, Any]] = []
    for uri in uris:
        parts = urlsplit(uri)
        if parts.scheme != "file":
            continue
        mount = job.spec.pod.mount_holding(parts.path)
        if mount is not None and mount not in found:
            found.append(mount)
    return found


def build_snapshot_pod(
    job: CheckpointedJob,
    *,
    name: str,
    snapshot_name: str,
    snapshot_uid: str,
    task: SnapshotTask,
    target: str,
    checkpoint: str | None,
    image: str,
    operator_config: OperatorConfig,
) -> Manifest:
    """Pod ``name`` running ``take-snapshot`` (copy ``checkpoint`` into ``target``) or
    ``dispose-snapshot`` (delete ``target``) for snapshot ``snapshot_name``."""
    config = operator_config
    args = ["take-snapshot", "--checkpoint", kubelet_literal(checkpoint or "")] \
        if task is SnapshotTask.TAKE else ["dispose-snapshot"]
    args += ["--target", kubelet_literal(target), "--snapshot-name", snapshot_name,
             "--snapshot-uid", snapshot_uid, "--termination-log", TERMINATION_LOG]
    container = storage_container(job, name=SNAPSHOT_CONTAINER, image=image,
                                  command=config.snapshot_command, args=args, config=config)
    mounts = storage_mounts(job, [target, *([checkpoint] if checkpoint else [])])
    if mounts:
        container["volumeMounts"] = [dict(m) for m in mounts]
    placement = driver_pod_placement(job)
    placement.pop("volumes", None)
    names = {m["name"] for m in mounts}
    volumes = [dict(v) for v in job.spec.pod.volumes if v.get("name") in names]
    if volumes:
        placement["volumes"] = volumes
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.metadata.namespace,
            "labels": {
                LABEL_NAME: APP_NAME,
                LABEL_INSTANCE: snapshot_name,
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_COMPONENT: ROLE_SNAPSHOT,
                LABEL_ROLE: ROLE_SNAPSHOT,
                LABEL_SNAPSHOT: snapshot_name,
            },
            "ownerReferences": [{
                "apiVersion": API_VERSION,
                "kind": SNAPSHOT_KIND,
                "name": snapshot_name,
                "uid": snapshot_uid,
                "controller": True,
            }],
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "automountServiceAccountToken": False,
            "securityContext": pod_security_context(job.spec.pod.security_context),
            "containers": [container],
            **placement,
        },
    }


def build_job_snapshot(job: CheckpointedJob, *, name: str, trigger: SnapshotTrigger,
                       checkpoint_id: int | None) -> Manifest:
    """A CheckpointedJobSnapshot the operator takes of ``job`` by itself
    (``spec.snapshots``): labelled with the job and why, owned by nobody (it outlives
    the job), disposed of with its object."""
    spec: dict[str, Any] = {"jobName": job.metadata.name}
    if checkpoint_id is not None:
        spec["checkpoint"] = checkpoint_id
    return {
        "apiVersion": API_VERSION,
        "kind": SNAPSHOT_KIND,
        "metadata": {
            "name": name,
            "namespace": job.metadata.namespace,
            "labels": {
                LABEL_NAME: APP_NAME,
                LABEL_INSTANCE: job.metadata.name,
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_JOB: job.metadata.name,
                LABEL_SNAPSHOT_TRIGGER: trigger.value,
            },
        },
        "spec": spec,
    }
