"""CheckpointedJob documents for the spec tests."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from cjob_spec import (
    CheckpointRef,
    Condition,
    ConditionStatus,
    FailureRecord,
    JobStatus,
    Phase,
    RestoredFrom,
)
from cjob_spec.status import PendingUpgrade, StableSpec

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)

MINIMAL: dict[str, Any] = {
    "apiVersion": "checkpointed.io/v1alpha1",
    "kind": "CheckpointedJob",
    "metadata": {"name": "clicks"},
    "spec": {
        "image": "example.org/clicks:1.0",
        "job": {"entrypoint": "clicks.job:build"},
        "checkpoint": {"storage": "file:///data/ckpt"},
    },
}

FULL: dict[str, Any] = {
    "apiVersion": "checkpointed.io/v1alpha1",
    "kind": "CheckpointedJob",
    "metadata": {
        "name": "clicks-per-user",
        "namespace": "analytics",
        "uid": "u-1",
        "generation": 3,
    },
    "spec": {
        "image": "example.org/clicks:1.0",
        "job": {
            "entrypoint": "clicks.job:build",
            "pythonPath": ["jobs/"],
            "args": {"input": "s3://in/clicks/", "output": "s3://out/clicks/", "limit": 10},
        },
        "parallelism": 4,
        "maxParallelism": 256,
        "spark": {
            "master": "k8s",
            "conf": {"spark.sql.shuffle.partitions": 8, "spark.ui.enabled": "false"},
            "driver": {"cores": 1, "memory": "2Gi"},
            "executor": {"instances": 2, "cores": 2, "memory": "4Gi"},
        },
        "checkpoint": {
            "storage": "s3://ckpt/clicks",
            "s3": {
                "endpoint": "http://minio:9000",
                "region": "eu-west-1",
                "credentialsSecret": "s3-creds",
            },
            "interval": "30s",
            "minPause": "5s",
            "timeout": "2m",
            "mode": "ExactlyOnce",
            "unaligned": True,
            "retained": 5,
            "tolerableFailures": 2,
            "triggerNonce": "manual-1",
        },
        "restartPolicy": {
            "type": "Always",
            "maxRestarts": 7,
            "backoff": {"initial": "1s", "max": "1m", "multiplier": 3},
            "resetAfter": "1h",
            "startTimeout": "90s",
        },
        "restore": {"from": "s3://old/chk-7/_metadata", "onUnreadable": "FallbackToPrevious",
                    "allowForeignJob": True, "allowNonRestoredState": True,
                    "redeployNonce": "again-1"},
        "suspend": True,
        "upgradeMode": "Snapshot",
        "state": {"backend": "rocksdb"},
        "standby": {"enabled": True},
        "rollback": {"enabled": True, "readinessTimeout": "2m"},
        "health": {"checkpointStallIntervals": 8, "sinkStallTimeout": "15m"},
        "snapshots": {"interval": "1h", "maxCount": 3, "maxAge": "72h", "beforeUpgrade": True},
        "cleanupPolicy": {"checkpoints": "Delete"},
        "autoscaler": {"mode": "Recommend", "min": 1, "max": 8, "targetLag": "30s",
                       "targetUtilization": 0.6, "stabilization": "2m"},
        "pod": {
            "volumes": [{"name": "scratch", "persistentVolumeClaim": {"claimName": "scratch"}}],
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch", "readOnly": False}],
            "nodeSelector": {"disktype": "ssd"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "spark",
                             "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
            },
            "priorityClassName": "batch-high",
            "env": [{"name": "LOG_LEVEL", "value": "info"},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "k"}}}],
            "envFrom": [{"prefix": "KAFKA_", "secretRef": {"name": "kafka", "optional": False}},
                        {"configMapRef": {"name": "tuning", "optional": True}}],
            "imagePullSecrets": [{"name": "registry"}],
            "driverTemplate": {"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"labels": {"team": "ads"},
                                            "annotations": {"owner": "ads"}},
                               "spec": {"hostAliases": []}},
            "executorTemplate": {"apiVersion": "v1", "kind": "Pod",
                                 "metadata": {"labels": {"pool": "spot"},
                                              "annotations": {"owner": "ads"}},
                                 "spec": {"tolerations": []}},
            "securityContext": {
                "runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                "fsGroupChangePolicy": "OnRootMismatch", "supplementalGroups": [2000],
                "seccompProfile": {"type": "Localhost", "localhostProfile": "spark.json"},
                "appArmorProfile": {"type": "Localhost", "localhostProfile": "spark"},
                "seLinuxOptions": {"user": "u", "role": "r", "type": "t", "level": "s0"},
                "sysctls": [{"name": "net.core.somaxconn", "value": "1024"}],
            },
            "containerSecurityContext": {
                "runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                "allowPrivilegeEscalation": False, "privileged": False,
                "readOnlyRootFilesystem": False,
                "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                "seccompProfile": {"type": "Localhost", "localhostProfile": "spark.json"},
                "appArmorProfile": {"type": "Localhost", "localhostProfile": "spark"},
                "seLinuxOptions": {"user": "u", "role": "r", "type": "t", "level": "s0"},
                "procMount": "Default",
            },
        },
    },
}


def minimal() -> dict[str, Any]:
    return copy.deepcopy(MINIMAL)


def full() -> dict[str, Any]:
    return copy.deepcopy(FULL)


def with_field(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``document`` with the dotted ``path`` set (intermediate maps created)."""
    result = copy.deepcopy(document)
    *parents, last = path.split(".")
    node = result
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return result


def without_field(document: dict[str, Any], path: str) -> dict[str, Any]:
    result = copy.deepcopy(document)
    *parents, last = path.split(".")
    node = result
    for key in parents:
        node = node[key]
    del node[last]
    return result


def full_status() -> JobStatus:
    return JobStatus(
        phase=Phase.RUNNING,
        reason="Running",
        message="attempt 2 is running",
        attempt=2,
        restarts=1,
        driver_pod="clicks-attempt-2",
        spec_hash="abc",
        started_at=T0,
        running_since=T0 + timedelta(seconds=5),
        last_restart_at=T0,
        next_restart_at=None,
        latest_checkpoint=CheckpointRef(
            id=42, path="s3://b/clicks-u/chk-42/_metadata", completed_at=T0, size_bytes=1048576
        ),
        restored_from=RestoredFrom(id=40, path="s3://b/clicks-u/chk-40/_metadata"),
        last_failure=FailureRecord(
            reason="DriverFailed", message="exit code 1", at=T0, exit_code=1, attempt=1
        ),
        conditions=(
            Condition(
                type="Ready",
                status=ConditionStatus.TRUE,
                reason="Running",
                message="",
                last_transition_time=T0,
                observed_generation=3,
            ),
        ),
        observed_generation=3,
        last_trigger_nonce="n1",
        suspend_requested_at=T0,
        stable_spec=StableSpec(spec_hash="abd", spec={"parallelism": 2, "job": {"args": {}}}),
        upgrade=PendingUpgrade(spec_hash="abc", started_at=T0, checkpoint_id=41),
        rolled_back_spec_hash="abe",
        discarded_through=8,
    )
