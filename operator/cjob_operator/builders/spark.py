"""The Spark settings the operator owns, and the executors' pod template.

The driver runs Spark in client mode inside its pod. With ``spark.master: k8s`` Spark
creates executor pods itself (owned by the driver pod, so they go when the driver
goes) and reaches back to the driver through the headless Service ``<job>-driver``;
with ``local[N]`` everything runs in the driver pod and none of this is needed beyond
the driver's own memory and cores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cjob_operator.builders.metadata import Manifest
from cjob_operator.builders.placement import shared_placement
from cjob_operator.builders.pod_template import pod_on_template
from cjob_operator.config import OperatorConfig
from cjob_spec.model import PERSISTENT_VOLUME_KINDS, CheckpointedJob, volume_kind
from cjob_spec.names import (
    EXECUTOR_CONTAINER,
    LABEL_ATTEMPT,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    ROLE_EXECUTOR,
    driver_pod_name,
    driver_service_name,
    executor_pod_name_prefix,
    spark_auth_secret_name,
    standby_executor_pod_name_prefix,
    standby_pod_name,
)
from cjob_spec.pod_ownership import EXECUTOR_TEMPLATE_VOLUME, OPERATOR_DIR
from cjob_spec.security import container_security_context, pod_security_context

KUBERNETES_MASTER = "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"
"""Kubernetes expands ``$(VAR)`` in container args from the container's environment,
which includes the API server address every pod gets."""
POD_TEMPLATE_VOLUME = EXECUTOR_TEMPLATE_VOLUME
POD_TEMPLATE_DIR = f"{OPERATOR_DIR}/executor-pod-template"
POD_TEMPLATE_FILE = f"{POD_TEMPLATE_DIR}/pod.yaml"
SPARK_AUTH_DIR = f"{OPERATOR_DIR}/spark-auth"
SPARK_AUTH_FILE_KEY = "key"
"""The Secret's raw random bytes: the driver reads them as a file."""
SPARK_AUTH_ENV_KEY = "key.base64"
"""The same bytes as Spark turns a key file into its key string (base64): executors take
them from their environment, set from the Secret by reference."""
SPARK_AUTH_FILE = f"{SPARK_AUTH_DIR}/{SPARK_AUTH_FILE_KEY}"
SPARK_AUTH_ENV = "_SPARK_AUTH_SECRET"
POD_IP_REFERENCE = "$(POD_IP)"
"""The pod's IP in a container's arguments: the kubelet expands it from ``env``."""


def driver_spark_conf(
    job: CheckpointedJob, *, attempt: int, image: str, config: OperatorConfig,
    standby: bool = False,
) -> dict[str, str]:
    """Spark settings the operator owns (users cannot override them in ``spark.conf``).

    Executors run ``image``, the driver's own: Spark's Python workers must unpickle
    what the driver's runtime pickles. A ``standby`` driver (started during
    ``attempt``) names its own pod and executors, and is reached at its pod's address:
    the Service selects only the promoted driver, and it must be reachable before."""
    spark = job.spec.spark
    conf = {
        "spark.driver.memory": spark.driver.memory.to_spark(),
        "spark.driver.cores": str(spark.driver.cores),
    }
    if not spark.is_kubernetes:
        return conf
    name = job.metadata.name
    namespace = job.metadata.namespace
    account_dir = config.service_account_dir.rstrip("/")
    executor_label = "spark.kubernetes.executor.label."
    conf.update(
        {
            "spark.submit.deployMode": "client",
            "spark.kubernetes.namespace": namespace,
            "spark.kubernetes.driver.pod.name": (standby_pod_name(name, attempt) if standby
                                                 else driver_pod_name(name, attempt)),
            "spark.kubernetes.container.image": image,
            "spark.kubernetes.container.image.pullPolicy": config.image_pull_policy,
            "spark.kubernetes.authenticate.caCertFile": f"{account_dir}/ca.crt",
            "spark.kubernetes.authenticate.oauthTokenFile": f"{account_dir}/token",
            "spark.kubernetes.executor.podNamePrefix": (
                standby_executor_pod_name_prefix(name, attempt) if standby
                else executor_pod_name_prefix(name, attempt)),
            f"{executor_label}{LABEL_JOB}": name,
            f"{executor_label}{LABEL_ATTEMPT}": str(attempt),
            f"{executor_label}{LABEL_ROLE}": ROLE_EXECUTOR,
            f"{executor_label}{LABEL_MANAGED_BY}": MANAGED_BY,
            "spark.driver.host": (POD_IP_REFERENCE if standby
                                  else f"{driver_service_name(name)}.{namespace}.svc"),
            "spark.driver.port": str(config.driver_port),
            "spark.driver.blockManager.port": str(config.block_manager_port),
            # Spark 4.1+ hands executors the driver's bind address, not spark.driver.host
            # (spark.kubernetes.executor.useDriverPodIP): it must be the pod's own IP,
            # which the kubelet substitutes from the POD_IP variable of driver_env.
            "spark.driver.bindAddress": POD_IP_REFERENCE,
            "spark.executor.instances": str(spark.executor.instances),
            "spark.executor.cores": str(spark.executor.cores),
            "spark.executor.memory": spark.executor.memory.to_spark(),
            # Executors get their security contexts from this template, a file the
            # driver pod mounts from its own annotation (see executor_pod_template).
            "spark.kubernetes.executor.podTemplateFile": POD_TEMPLATE_FILE,
            "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
            # No per-application executor ConfigMap: the executors get their settings
            # from the environment Spark sets, and the driver needs no rights to
            # create or delete ConfigMaps (see build_role).
            "spark.kubernetes.executor.disableConfigMap": "true",
            # Spark's RPC secret comes from the job's Secret (build_spark_auth_secret).
            # Left alone, Spark generates one and writes its value into every executor's
            # pod spec, readable by all who may read pods in the namespace. The driver
            # reads the key file it mounts. Executors cannot read key files in client
            # mode (Spark reads them only where it knows the master, and the executors'
            # settings do not carry it), so they take the same key from their
            # environment, set by reference to the Secret; naming an executor key file
            # is what stops Spark from adding its own value.
            "spark.authenticate.secret.driver.file": SPARK_AUTH_FILE,
            "spark.authenticate.secret.executor.file": SPARK_AUTH_FILE,
            f"spark.kubernetes.executor.secretKeyRef.{SPARK_AUTH_ENV}":
                f"{spark_auth_secret_name(name)}:{SPARK_AUTH_ENV_KEY}",
        }
    )
    conf.update(executor_volume_conf(job))
    for key, value in job.spec.pod.node_selector.items():
        conf[f"spark.kubernetes.node.selector.{key}"] = value
    return conf


def executor_volume_conf(job: CheckpointedJob) -> dict[str, str]:
    """Spark settings that mount the driver's persistent volumes into executors too.

    With Spark on Kubernetes the subtasks run in executor pods and write ``file://``
    checkpoints from there, so they need the same volumes at the same paths. Spark
    mounts only what its ``spark.kubernetes.executor.volumes.*`` settings name, and
    only some volume kinds; others (an ``emptyDir`` holds nothing worth sharing) are
    left to the user's ``spark.conf``.
    """
    pod = job.spec.pod
    conf: dict[str, str] = {}
    for mount in pod.volume_mounts:
        name = str(mount["name"])
        volume = pod.volume(name) or {}
        kind = volume_kind(volume)
        if kind not in PERSISTENT_VOLUME_KINDS:
            continue
        source = volume[kind] if isinstance(volume.get(kind), Mapping) else {}
        prefix = f"spark.kubernetes.executor.volumes.{kind}.{name}"
        conf[f"{prefix}.mount.path"] = str(mount["mountPath"])
        conf[f"{prefix}.mount.readOnly"] = "true" if mount.get("readOnly") else "false"
        if mount.get("subPath"):
            conf[f"{prefix}.mount.subPath"] = str(mount["subPath"])
        options = {"persistentVolumeClaim": ("claimName",), "hostPath": ("path", "type"),
                   "nfs": ("server", "path")}[kind]
        for option in options:
            if source.get(option) is not None:
                conf[f"{prefix}.options.{option}"] = str(source[option])
    return conf


def executor_pod_template(job: CheckpointedJob) -> Manifest:
    """The pod template Spark starts every executor pod from.

    Spark keeps what a template sets and fills in what it owns (name, namespace, its
    labels, image, command, resources, its variables after the template's, the
    volumes of its ``spark.kubernetes.executor.volumes.*`` settings). So this carries
    what ``spec.pod`` gives every pod of the job: the security contexts, variables,
    image pull secrets, tolerations, affinity and priority, and the volumes Spark's
    settings cannot mount (Secrets, ConfigMaps, ``emptyDir``...; the persistent ones
    go through Spark's settings, see :func:`executor_volume_conf`), all laid over
    ``spec.pod.executorTemplate``. It travels with the driver pod as an annotation,
    mounted as a file through the downward API: it always matches the attempt, and
    needs no object of its own and no rights.
    """
    pod = job.spec.pod
    container: dict[str, Any] = {
        "name": EXECUTOR_CONTAINER,
        "securityContext": container_security_context(pod.container_security_context),
    }
    if pod.env:
        container["env"] = [dict(v) for v in pod.env]
    if pod.env_from:
        container["envFrom"] = [dict(v) for v in pod.env_from]
    others = [volume for volume in pod.volumes
              if volume_kind(volume) not in PERSISTENT_VOLUME_KINDS]
    other_names = {str(volume["name"]) for volume in others}
    mounts = [dict(m) for m in pod.volume_mounts if m["name"] in other_names]
    if mounts:
        container["volumeMounts"] = mounts
    spec: dict[str, Any] = {
        "securityContext": pod_security_context(pod.security_context),
        "containers": [container],
    }
    if others:
        spec["volumes"] = [dict(v) for v in others]
    spec.update(shared_placement(pod))
    return pod_on_template(pod.executor_template, {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": {LABEL_JOB: job.metadata.name, LABEL_ROLE: ROLE_EXECUTOR}},
        "spec": spec,
    })
