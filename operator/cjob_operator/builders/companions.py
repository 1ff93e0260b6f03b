"""The objects a job's driver runs with: its Service, account and rights, Spark's secret,
the job's NetworkPolicy and its checkpoint ConfigMap.

They are ensured at the start of every attempt (created, or brought up to date), so one
deleted by hand comes back with the next attempt.
"""

from __future__ import annotations

import base64
from typing import Any

from cjob_operator.builders.metadata import (
    COMPONENT_CHECKPOINT_STORE,
    COMPONENT_NETWORK_POLICY,
    COMPONENT_SPARK_AUTH,
    Manifest,
    object_metadata,
)
from cjob_operator.builders.spark import SPARK_AUTH_ENV_KEY, SPARK_AUTH_FILE_KEY
from cjob_operator.config import OperatorConfig
from cjob_spec.model import CheckpointedJob
from cjob_spec.names import (
    ANNOTATION_FENCE,
    LABEL_JOB,
    LABEL_ROLE,
    ROLE_DRIVER,
    checkpoint_configmap_name,
    driver_service_name,
    network_policy_name,
    role_binding_name,
    role_name,
    service_account_name,
    spark_auth_secret_name,
)

SPARK_AUTH_SECRET_BYTES = 32
"""Random bytes of Spark's RPC secret (the least a caller may give)."""


def driver_selector(job: CheckpointedJob) -> dict[str, str]:
    """Selects the driver pod of whatever attempt is current, never executors."""
    return {LABEL_JOB: job.metadata.name, LABEL_ROLE: ROLE_DRIVER}


def build_driver_service(job: CheckpointedJob, *, operator_config: OperatorConfig) -> Manifest:
    """Headless Service giving the driver a stable DNS name for its executors."""
    config = operator_config
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(
            job, name=driver_service_name(job.metadata.name), component=ROLE_DRIVER
        ),
        "spec": {
            "clusterIP": "None",
            "selector": driver_selector(job),
            "ports": [
                {
                    "name": "driver-rpc",
                    "port": config.driver_port,
                    "targetPort": config.driver_port,
                },
                {
                    "name": "blockmanager",
                    "port": config.block_manager_port,
                    "targetPort": config.block_manager_port,
                },
                {"name": "metrics", "port": config.metrics_port, "targetPort": config.metrics_port},
                {"name": "spark-ui", "port": config.ui_port, "targetPort": config.ui_port},
            ],
        },
    }


def build_service_account(job: CheckpointedJob) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_metadata(
            job, name=service_account_name(job.metadata.name), component=ROLE_DRIVER
        ),
        "automountServiceAccountToken": True,
    }


def build_role(job: CheckpointedJob) -> Manifest:
    """The driver's rights, and nothing more.

    Every driver may read, watch and update only its own checkpoint ConfigMap (the
    store's compare-and-swap; checkpoint requests and a standby's promotion arrive as
    annotations on it) and create events. With Spark on Kubernetes it also manages its executor pods, as Spark's
    scheduler backend does in client mode: create them, list and watch them (by
    label), get the driver pod (the executors' owner), delete them one by one and by
    label. Kubernetes cannot narrow create, list, watch or deletecollection by name,
    and executor names are chosen by Spark at run time, so the pod rule covers the
    namespace: that is why a job is best run in a namespace of its own (see the
    chart README). Spark's executor ConfigMap is switched off
    (``spark.kubernetes.executor.disableConfigMap``), so there is no other ConfigMap
    right; in client mode Spark creates no Service, and without on-demand claims no
    PersistentVolumeClaim (it only lists them, and tolerates being refused). No
    Secrets, no access outside the namespace.
    """
    name = job.metadata.name
    rules: list[dict[str, Any]] = [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [checkpoint_configmap_name(name)],
            # list and watch are narrowed to the one ConfigMap by name as well: a
            # standby driver watches it for its promotion (fieldSelector metadata.name).
            "verbs": ["get", "list", "watch", "update", "patch"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    if job.spec.spark.is_kubernetes:
        rules.append(
            {
                "apiGroups": [""],
                "resources": ["pods"],
                "verbs": ["create", "get", "list", "watch", "delete", "deletecollection"],
            }
        )
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": object_metadata(job, name=role_name(name), component=ROLE_DRIVER),
        "rules": rules,
    }


def build_role_binding(job: CheckpointedJob) -> Manifest:
    name = job.metadata.name
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_metadata(job, name=role_binding_name(name), component=ROLE_DRIVER),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role_name(name),
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": service_account_name(name),
                "namespace": job.metadata.namespace,
            }
        ],
    }


def build_spark_auth_secret(job: CheckpointedJob, *, key: bytes) -> Manifest:
    """The shared secret of Spark's RPC between the job's driver and its executors.

    ``key`` comes from the caller (random bytes), so this stays a pure builder. The
    Secret is created once per job and kept while the job exists: every attempt's
    driver and executors read it as a file, so the value never appears in a pod spec.
    Only those who may read Secrets in the namespace can read it.
    """
    if len(key) < SPARK_AUTH_SECRET_BYTES:
        raise ValueError(
            f"the Spark RPC secret needs at least {SPARK_AUTH_SECRET_BYTES} random bytes")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_metadata(
            job, name=spark_auth_secret_name(job.metadata.name), component=COMPONENT_SPARK_AUTH
        ),
        "type": "Opaque",
        "data": {
            SPARK_AUTH_FILE_KEY: base64.b64encode(key).decode("ascii"),
            SPARK_AUTH_ENV_KEY: base64.b64encode(
                base64.b64encode(key)).decode("ascii"),
        },
    }


def build_network_policy(job: CheckpointedJob, *, operator_config: OperatorConfig) -> Manifest:
    """Only the job's own pods may reach its pods; its metrics port, anyone.

    It selects the driver and the executors by the job label both carry, and admits
    traffic from pods with the same label (Spark's RPC, block transfers, the
    subtasks' channels) plus the metrics port from anywhere, for Prometheus. Egress
    is left open: drivers talk to the API server, S3 and DNS. A NetworkPolicy only
    takes effect with a network plugin that enforces it.
    """
    labels = {LABEL_JOB: job.metadata.name}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_metadata(
            job, name=network_policy_name(job.metadata.name), component=COMPONENT_NETWORK_POLICY
        ),
        "spec": {
            "podSelector": {"matchLabels": dict(labels)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": dict(labels)}}]},
                {"ports": [{"protocol": "TCP", "port": operator_config.metrics_port}]},
            ],
        },
    }


def build_checkpoint_configmap(job: CheckpointedJob, *, fence_attempt: int = 0) -> Manifest:
    """The empty completed-checkpoint store; the runtime fills it under the fence."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_metadata(
            job,
            name=checkpoint_configmap_name(job.metadata.name),
            component=COMPONENT_CHECKPOINT_STORE,
            annotations={ANNOTATION_FENCE: str(fence_attempt)},
        ),
        "data": {},
    }
