"""The running sum as the real-node scenarios apply it: its code in a ConfigMap, its S3
settings and its CheckpointedJob manifest.

One builder for every scenario (the exactly-once kills, the cleanup, the chaos run),
each changing what it is about and nothing else.
"""

from __future__ import annotations

from typing import Any

from e2e.jobs import RUNNING_SUM_DIR
from e2e.realnode import scenario
from e2e.realnode.cluster_s3 import CREDENTIALS_SECRET, ClusterS3

CODE_CONFIGMAP = "running-sum-code"
CODE_VOLUME = {"name": "code", "configMap": {"name": CODE_CONFIGMAP}}
CODE_MOUNT = {"name": "code", "mountPath": "/opt/cjob/jobs/running-sum", "readOnly": True}


def code_configmap(kubectl: scenario.Kubectl, namespace: str) -> None:
    """The job's code, ``job.py``, as the ConfigMap its pods mount."""
    kubectl("create", "configmap", CODE_CONFIGMAP, "--namespace", namespace,
            f"--from-file=job.py={RUNNING_SUM_DIR / 'job.py'}")  # fmt: skip


def s3_settings(s3: ClusterS3) -> dict[str, Any]:
    """``spec.checkpoint.s3`` for the cluster's S3 server and its credentials Secret."""
    return {"endpoint": s3.cluster_endpoint, "credentialsSecret": CREDENTIALS_SECRET}


def manifest(
    *, name: str, storage: str, output: str, master: str, s3: dict[str, Any] | None,
    pod: dict[str, Any], count: int, rate: int, parallelism: int = 2,
    cleanup: str = "Retain",
) -> dict[str, Any]:  # fmt: skip
    """The running sum of ``count`` records at ``rate`` a second: checkpoints every
    second, three retained; with ``master: k8s`` its executors ask for a fraction of a
    core (two CPUs for the whole node)."""
    checkpoint: dict[str, Any] = {"storage": storage, "interval": "1s", "retained": 3}
    if s3 is not None:
        checkpoint["s3"] = s3
    spark: dict[str, Any] = {"master": master, "driver": {"cores": 1, "memory": "768Mi"}}
    if master == "k8s":
        spark["executor"] = {"instances": parallelism, "cores": 1, "memory": "640Mi"}
        spark["conf"] = {"spark.kubernetes.executor.request.cores": "200m"}
    return {
        "apiVersion": "checkpointed.io/v1alpha1",
        "kind": "CheckpointedJob",
        "metadata": {"name": name},
        "spec": {
            "job": {
                "entrypoint": "job:build",
                "pythonPath": ["/opt/cjob/jobs/running-sum"],
                "args": {"output": output, "count": count, "rate": rate},
            },
            "parallelism": parallelism,
            "spark": spark,
            "checkpoint": checkpoint,
            "restartPolicy": {
                "type": "OnFailure",
                "maxRestarts": 3,
                "backoff": {"initial": "1s", "max": "5s"},
            },
            "cleanupPolicy": {"checkpoints": cleanup},
            "pod": pod,
        },
    }
