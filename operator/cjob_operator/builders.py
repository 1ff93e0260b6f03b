"""Manifests of the objects the operator creates for a CheckpointedJob, as pure functions.

Every object carries the standard labels and a controller owner reference to the
CheckpointedJob, so ``kubectl get all -l checkpointed.io/job=<name>`` finds them and
Kubernetes garbage-collects them with the job.

The driver runs Spark in client mode inside its pod. With ``spark.master: k8s`` Spark
creates executor pods itself (owned by the driver pod, so they go when the driver
goes) and reaches back to the driver through the headless Service ``<job>-driver``;
with ``local[N]`` everything runs in the driver pod and no Service or pod rights are
needed.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import yaml

from cjob_operator.config import OperatorConfig
from cjob_spec.driver_env import driver_env as spec_driver_env
from cjob_spec.errors import SpecError
from cjob_spec.model import (
    PERSISTENT_VOLUME_KINDS,
    CheckpointedJob,
    spec_hash,
    volume_kind,
)
from cjob_spec.names import (
    ANNOTATION_EXECUTOR_POD_TEMPLATE,
    ANNOTATION_FENCE,
    ANNOTATION_RESTORE,
    ANNOTATION_SPEC_HASH,
    API_VERSION,
    APP_NAME,
    KIND,
    LABEL_ATTEMPT,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_ROLE,
    MANAGED_BY,
    ROLE_STANDBY,
    checkpoint_configmap_name,
    cleanup_pod_name,
    driver_pod_name,
    driver_service_name,
    executor_pod_name_prefix,
    network_policy_name,
    role_binding_name,
    role_name,
    service_account_name,
    spark_auth_secret_name,
    standby_executor_pod_name_prefix,
    standby_pod_name,
)
from cjob_spec.parse import DRIVER_REQUEST_CORES
from cjob_spec.quantities import MIB, format_kubernetes_memory
from cjob_spec.runtime_args import configmap_store_arg, to_runtime_args
from cjob_spec.security import container_security_context, pod_security_context

Manifest = dict[str, Any]

DRIVER_CONTAINER = "driver"
ROLE_DRIVER = "driver"
ROLE_EXECUTOR = "executor"
ROLE_CLEANUP = "cleanup"
CLEANUP_CONTAINER = "cleanup"
CLEANUP_MEMORY = "256Mi"
"""Python with boto3 listing and deleting objects in batches of 1000."""
CLEANUP_CPU = "100m"
TERMINATION_LOG = "/dev/termination-log"
KUBERNETES_MASTER = "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"
"""Kubernetes expands ``$(VAR)`` in container args from the container's environment,
which includes the API server address every pod gets."""
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
"""Spark's own name for the executor container, kept in the pod template."""
POD_TEMPLATE_VOLUME = "executor-pod-template"
POD_TEMPLATE_DIR = "/etc/checkpointed-jobs/executor-pod-template"
POD_TEMPLATE_FILE = f"{POD_TEMPLATE_DIR}/pod.yaml"
SPARK_AUTH_VOLUME = "spark-auth"
SPARK_AUTH_DIR = "/etc/checkpointed-jobs/spark-auth"
SPARK_AUTH_FILE_KEY = "key"
"""The Secret's raw random bytes: the driver reads them as a file."""
SPARK_AUTH_ENV_KEY = "key.base64"
"""The same bytes as Spark turns a key file into its key string (base64): executors take
them from their environment, set from the Secret by reference."""
SPARK_AUTH_FILE = f"{SPARK_AUTH_DIR}/{SPARK_AUTH_FILE_KEY}"
SPARK_AUTH_ENV = "_SPARK_AUTH_SECRET"
POD_IP_REFERENCE = "$(POD_IP)"
"""The pod's IP in a container's arguments: the kubelet expands it from ``env``."""


STANDBY_READY_FILE = "checkpointed-jobs-standby.ready"
"""Where a standby pod's driver says it is ready, in its temporary directory (the
runtime takes a relative ``--standby-ready-file`` there); its readiness probe tests
the same file, in the container's ``$TMPDIR`` or ``/tmp``."""
STANDBY_READY_PERIOD_SECONDS = 2
"""Each probe is an exec into the container: cheap, but not free on a small node."""


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


def _metadata(
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


def driver_selector(job: CheckpointedJob) -> dict[str, str]:
    """Selects the driver pod of whatever attempt is current, never executors."""
    return {LABEL_JOB: job.metadata.name, LABEL_ROLE: ROLE_DRIVER}


def driver_memory_request_bytes(job: CheckpointedJob, config: OperatorConfig) -> int:
    """Container memory: the JVM heap plus Spark's usual non-heap overhead."""
    heap = job.spec.spark.driver.memory.bytes
    proportional = -(-int(heap * config.memory_overhead_factor) // MIB) * MIB
    return heap + max(config.min_memory_overhead_bytes, proportional)


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

    Spark keeps a template's security contexts and fills in what it owns (name,
    namespace, labels, image, command, resources, env, the volumes of its
    ``spark.kubernetes.executor.volumes.*`` settings). The template travels with the
    driver pod as an annotation, mounted as a file through the downward API: it
    always matches the attempt, and needs no object of its own and no rights.
    """
    pod = job.spec.pod
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": {LABEL_JOB: job.metadata.name, LABEL_ROLE: ROLE_EXECUTOR}},
        "spec": {
            "securityContext": pod_security_context(pod.security_context),
            "containers": [
                {
                    "name": EXECUTOR_CONTAINER,
                    "securityContext": container_security_context(
                        pod.container_security_context
                    ),
                }
            ],
        },
    }


def driver_env(job: CheckpointedJob, config: OperatorConfig) -> list[dict[str, Any]]:
    """The driver container's ``env``: the pod's identity, then what the spec gives every
    driver (:func:`cjob_spec.driver_env.driver_env`, shared with ``cjob run`` so both
    supervisors pass the same settings), then the operator's extra variables."""
    env: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    return env + storage_env(job, config)


def storage_env(job: CheckpointedJob, config: OperatorConfig) -> list[dict[str, Any]]:
    """What the spec gives every driver, then the operator's extra variables.

    Credentials stay references (``secretKeyRef``): the kubelet reads the Secret when
    it starts the container, the operator never does.
    """
    env: list[dict[str, Any]] = []
    for var in spec_driver_env(job):
        if var.secret is not None:
            env.append({
                "name": var.name,
                "valueFrom": {"secretKeyRef": {"name": var.secret.secret, "key": var.secret.key}},
            })
        else:
            env.append({"name": var.name, "value": var.value})
    for key in sorted(config.extra_env):
        env.append({"name": key, "value": config.extra_env[key]})
    return env


def build_cleanup_pod(
    job: CheckpointedJob,
    *,
    uri: str,
    image: str,
    deadline_seconds: int,
    operator_config: OperatorConfig,
) -> Manifest:
    """The pod that deletes a deleted job's checkpoint directory ``uri``.

    It reaches the storage as the job's driver does, so the operator needs neither
    Secret reads nor the job's volumes: the same image, security contexts, volumes
    and placement (``spec.pod``), and the same S3 environment with the credentials
    as ``secretKeyRef``. It needs no API access, so it runs without a service
    account token. The kubelet stops it after ``deadline_seconds``; its one-line
    outcome is the container's termination message (or, should it die without
    writing one, the end of its log).
    """
    config = operator_config
    name = job.metadata.name
    uid = job.metadata.uid
    if not uid:
        raise SpecError(field="metadata.uid", problem="is required to delete checkpoint data")
    container: dict[str, Any] = {
        "name": CLEANUP_CONTAINER,
        "image": image,
        "imagePullPolicy": config.image_pull_policy,
        "command": list(config.cleanup_command),
        "args": ["--uri", uri, "--job-name", name, "--job-uid", uid,
                 "--termination-log", TERMINATION_LOG],
        "env": storage_env(job, config),
        "resources": {
            "requests": {"cpu": CLEANUP_CPU, "memory": CLEANUP_MEMORY},
            "limits": {"memory": CLEANUP_MEMORY},
        },
        "securityContext": container_security_context(job.spec.pod.container_security_context),
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if job.spec.pod.volume_mounts:
        container["volumeMounts"] = [dict(m) for m in job.spec.pod.volume_mounts]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(
            job,
            name=cleanup_pod_name(name),
            component=ROLE_CLEANUP,
            extra_labels={LABEL_ROLE: ROLE_CLEANUP},
        ),
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": deadline_seconds,
            "automountServiceAccountToken": False,
            "securityContext": pod_security_context(job.spec.pod.security_context),
            "containers": [container],
            **driver_pod_placement(job),
        },
    }


def build_driver_pod(
    job: CheckpointedJob,
    *,
    attempt: int,
    restore_pointer: str,
    image: str,
    operator_config: OperatorConfig,
) -> Manifest:
    """The driver pod of ``attempt``: ``python -m job_runtime run`` with the job's flags.

    ``image`` is what ``plan`` chose: ``spec.image`` or the operator's runtime image.
    """
    args = _runtime_args(job, attempt=attempt, restore_pointer=restore_pointer, image=image,
                         operator_config=operator_config)
    return _driver_pod(job, name=driver_pod_name(job.metadata.name, attempt), role=ROLE_DRIVER,
                       attempt=attempt, args=args, image=image,
                       annotations={ANNOTATION_RESTORE: restore_pointer},
                       operator_config=operator_config)


def build_standby_pod(
    job: CheckpointedJob,
    *,
    attempt: int,
    image: str,
    operator_config: OperatorConfig,
) -> Manifest:
    """The warm standby driver started while ``attempt`` runs (``spec.standby``).

    It runs the next attempt's driver, but with ``--standby-pod``: it starts Spark (and
    with ``k8s``, its own executors), loads the job's code, writes
    :data:`STANDBY_READY_FILE` (which its readiness probe tests: the pod turns Ready) and waits for
    the operator to record its promotion on the checkpoint ConfigMap. Its role label
    is ``standby`` until then, so the driver Service does not select it.
    """
    name = standby_pod_name(job.metadata.name, attempt)
    # The next attempt's driver (it takes no attempt before it), with Spark settings
    # of its own: its pod and executors are named apart from the running attempt's.
    args = [*_runtime_args(job, attempt=attempt + 1, restore_pointer="latest", image=image,
                           operator_config=operator_config, spark_conf_attempt=attempt,
                           standby=True),
            "--standby-pod", name, "--standby-ready-file", STANDBY_READY_FILE]
    pod = _driver_pod(job, name=name, role=ROLE_STANDBY, attempt=attempt, args=args,
                      image=image, annotations={}, operator_config=operator_config)
    pod["spec"]["containers"][0]["readinessProbe"] = {
        "exec": {"command": ["sh", "-c", f'test -f "${{TMPDIR:-/tmp}}/{STANDBY_READY_FILE}"']},
        "periodSeconds": STANDBY_READY_PERIOD_SECONDS,
        "failureThreshold": 1,
    }
    return pod


def _runtime_args(
    job: CheckpointedJob,
    *,
    attempt: int,
    restore_pointer: str,
    image: str,
    operator_config: OperatorConfig,
    spark_conf_attempt: int | None = None,
    standby: bool = False,
) -> list[str]:
    """``python -m job_runtime run`` arguments of a driver pod: the job's flags, the
    ConfigMap store, the master and the operator's Spark settings (for
    ``spark_conf_attempt``, by default ``attempt``)."""
    return to_runtime_args(
        job,
        restore_pointer=restore_pointer,
        attempt=attempt,
        store=configmap_store_arg(namespace=job.metadata.namespace,
                                  name=checkpoint_configmap_name(job.metadata.name)),
        master=KUBERNETES_MASTER if job.spec.spark.is_kubernetes else job.spec.spark.master,
        extra_spark_conf=driver_spark_conf(
            job, attempt=attempt if spark_conf_attempt is None else spark_conf_attempt,
            image=image, config=operator_config, standby=standby),
        metrics_port=operator_config.metrics_port,
        # With a standby, every driver listens for it at the pod's address (the kubelet
        # substitutes POD_IP, see driver_env), and the standby watches the active one.
        beacon_host=POD_IP_REFERENCE if job.spec.standby.enabled else None,
    )


def _driver_pod(
    job: CheckpointedJob,
    *,
    name: str,
    role: str,
    attempt: int,
    args: list[str],
    image: str,
    annotations: dict[str, str],
    operator_config: OperatorConfig,
) -> Manifest:
    """A pod running ``python -m job_runtime run ARGS``: a driver, or a standby one."""
    config = operator_config
    spark = job.spec.spark
    memory = format_kubernetes_memory(driver_memory_request_bytes(job, config))
    ports = [{"name": "metrics", "containerPort": config.metrics_port, "protocol": "TCP"}]
    if spark.is_kubernetes:
        ports += [
            {"name": "driver-rpc", "containerPort": config.driver_port, "protocol": "TCP"},
            {"name": "blockmanager", "containerPort": config.block_manager_port, "protocol": "TCP"},
        ]
    ports.append({"name": "spark-ui", "containerPort": config.ui_port, "protocol": "TCP"})
    container: dict[str, Any] = {
        "name": DRIVER_CONTAINER,
        "image": image,
        "imagePullPolicy": config.image_pull_policy,
        "command": list(config.runtime_command),
        "args": args,
        "env": driver_env(job, config),
        "ports": ports,
        "resources": {
            "requests": {"cpu": spark.conf.get(DRIVER_REQUEST_CORES, str(spark.driver.cores)),
                         "memory": memory},
            "limits": {"memory": memory},
        },
        "securityContext": container_security_context(job.spec.pod.container_security_context),
    }
    mounts = [dict(m) for m in job.spec.pod.volume_mounts]
    volumes = [dict(v) for v in job.spec.pod.volumes]
    annotations = {
        ANNOTATION_SPEC_HASH: spec_hash(job),
        **annotations,
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(config.metrics_port),
    }
    if spark.is_kubernetes:
        annotations[ANNOTATION_EXECUTOR_POD_TEMPLATE] = yaml.safe_dump(
            executor_pod_template(job), sort_keys=True
        )
        mounts.append({"name": POD_TEMPLATE_VOLUME, "mountPath": POD_TEMPLATE_DIR,
                       "readOnly": True})
        volumes.append({
            "name": POD_TEMPLATE_VOLUME,
            "downwardAPI": {"items": [{
                "path": POD_TEMPLATE_FILE.rsplit("/", 1)[1],
                "fieldRef": {
                    "fieldPath": f"metadata.annotations['{ANNOTATION_EXECUTOR_POD_TEMPLATE}']"
                },
            }]},
        })
        mounts.append({"name": SPARK_AUTH_VOLUME, "mountPath": SPARK_AUTH_DIR, "readOnly": True})
        volumes.append({
            "name": SPARK_AUTH_VOLUME,
            "secret": {"secretName": spark_auth_secret_name(job.metadata.name),
                       "items": [{"key": SPARK_AUTH_FILE_KEY, "path": SPARK_AUTH_FILE_KEY}]},
        })
    if mounts:
        container["volumeMounts"] = mounts
    placement = driver_pod_placement(job)
    if volumes:
        placement["volumes"] = volumes
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(
            job,
            name=name,
            component=ROLE_DRIVER,
            extra_labels={LABEL_ROLE: role, LABEL_ATTEMPT: str(attempt)},
            annotations=annotations,
        ),
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": service_account_name(job.metadata.name),
            "automountServiceAccountToken": True,
            "terminationGracePeriodSeconds": config.termination_grace_seconds,
            "securityContext": pod_security_context(job.spec.pod.security_context),
            "containers": [container],
            **placement,
        },
    }


def driver_pod_placement(job: CheckpointedJob) -> dict[str, Any]:
    """The pod fields ``spec.pod`` sets: volumes, node selection, tolerations, priority."""
    pod = job.spec.pod
    fields: dict[str, Any] = {}
    if pod.volumes:
        fields["volumes"] = [dict(v) for v in pod.volumes]
    if pod.node_selector:
        fields["nodeSelector"] = dict(pod.node_selector)
    if pod.tolerations:
        fields["tolerations"] = [dict(t) for t in pod.tolerations]
    if pod.affinity is not None:
        fields["affinity"] = dict(pod.affinity)
    if pod.priority_class_name:
        fields["priorityClassName"] = pod.priority_class_name
    return fields


def build_driver_service(job: CheckpointedJob, *, operator_config: OperatorConfig) -> Manifest:
    """Headless Service giving the driver a stable DNS name for its executors."""
    config = operator_config
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(
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
        "metadata": _metadata(
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
        "metadata": _metadata(job, name=role_name(name), component=ROLE_DRIVER),
        "rules": rules,
    }


def build_role_binding(job: CheckpointedJob) -> Manifest:
    name = job.metadata.name
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(job, name=role_binding_name(name), component=ROLE_DRIVER),
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
    if len(key) < 32:
        raise ValueError("the Spark RPC secret needs at least 32 random bytes")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(
            job, name=spark_auth_secret_name(job.metadata.name), component="spark-auth"
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
        "metadata": _metadata(
            job, name=network_policy_name(job.metadata.name), component="network-policy"
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
        "metadata": _metadata(
            job,
            name=checkpoint_configmap_name(job.metadata.name),
            component="checkpoint-store",
            annotations={ANNOTATION_FENCE: str(fence_attempt)},
        ),
        "data": {},
    }
