"""What of a job's pods the operator (or Spark) sets, and so no user template may.

A pod template (``spec.pod.driverTemplate``, ``spec.pod.executorTemplate``) is the base
a pod is built on: every field it sets stays, unless the operator sets the same field,
when the operator's value would silently win. The parser refuses such a template and
names the field and where its value comes from instead; the builders read the same
names, so the list the user is told about is the list that is enforced.
"""

from __future__ import annotations

from collections.abc import Mapping

OPERATOR_DIR = "/etc/checkpointed-jobs"
"""Where the operator mounts what a driver reads (its executors' pod template, Spark's
RPC key): no template mount may be at or under it."""
EXECUTOR_TEMPLATE_VOLUME = "executor-pod-template"
SPARK_AUTH_VOLUME = "spark-auth"
OPERATOR_VOLUMES = (EXECUTOR_TEMPLATE_VOLUME, SPARK_AUTH_VOLUME)
SPARK_VOLUME_PREFIX = "spark-"
"""Spark names the volumes it adds to executors (local directories) with this prefix."""

OPERATOR_ENV = ("POD_NAME", "POD_NAMESPACE", "POD_IP", "PYTHONUNBUFFERED")
"""Variables the operator gives every driver (the pod's identity, unbuffered output)."""
SPARK_ENV_PREFIXES = ("SPARK_", "_SPARK")
"""Spark sets its executors' settings (``SPARK_EXECUTOR_ID``, ``SPARK_DRIVER_URL``...)
and the RPC key in variables of these prefixes."""

OWNED_LABEL_PREFIXES = ("checkpointed.io/",)
OWNED_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance",
                "app.kubernetes.io/managed-by", "app.kubernetes.io/component",
                "spark-role", "spark-app-selector", "spark-app-name", "spark-exec-id",
                "spark-exec-resourceprofile-id")
OWNED_ANNOTATION_PREFIXES = ("checkpointed.io/",)
OWNED_ANNOTATIONS = ("prometheus.io/scrape", "prometheus.io/port")

TEMPLATE_METADATA = ("labels", "annotations")
"""The only metadata a template may give: name, namespace and owners are the operator's."""

OWNED_POD_FIELDS: Mapping[str, str] = {
    "restartPolicy": "set by the operator (Never: a failed attempt is restarted by the "
                     "operator, from a checkpoint)",
    "serviceAccountName": "set by the operator (the job's own service account)",
    "serviceAccount": "set by the operator (the job's own service account)",
    "automountServiceAccountToken": "set by the operator (drivers need their token)",
    "terminationGracePeriodSeconds": "set by the operator (its terminationGracePeriodSeconds "
                                     "setting)",
    "securityContext": "set from spec.pod.securityContext",
    "activeDeadlineSeconds": "set by the operator (a job has no deadline)",
    "hostname": "set by the operator or Spark",
    "subdomain": "set by the operator or Spark",
}

OWNED_CONTAINER_FIELDS: Mapping[str, str] = {
    "image": "set from spec.image",
    "imagePullPolicy": "set by the operator (its image pull policy)",
    "command": "set by the operator (the job's runtime)",
    "args": "set by the operator (the job's runtime)",
    "resources": "set from spec.spark.driver and spec.spark.executor",
    "ports": "set by the operator (the driver's and Spark's ports)",
    "securityContext": "set from spec.pod.containerSecurityContext",
    "readinessProbe": "set by the operator (a standby's readiness)",
    "startupProbe": "set by the operator",
}

SHARED_SINGLE_FIELDS: Mapping[str, str] = {
    "affinity": "affinity",
    "priorityClassName": "priorityClassName",
}
"""Pod fields spec.pod gives every pod: a template may set one only where spec.pod does not."""


def is_owned_label(key: str) -> bool:
    return key.startswith(OWNED_LABEL_PREFIXES) or key in OWNED_LABELS


def is_owned_annotation(key: str) -> bool:
    return key.startswith(OWNED_ANNOTATION_PREFIXES) or key in OWNED_ANNOTATIONS


def env_owner(name: str) -> str | None:
    """Who sets the variable ``name`` in a job's containers, or None when nobody does
    (what ``spec.checkpoint.s3`` sets is checked against that section)."""
    if name in OPERATOR_ENV:
        return "the operator"
    if name.startswith(SPARK_ENV_PREFIXES):
        return "Spark"
    return None
