"""The pods the operator creates: an attempt's driver, a standby driver, the cleanup pod.

A driver pod runs ``python -m job_runtime run`` with the job's flags, the checkpoint
ConfigMap as its store and the Spark settings of :mod:`~cjob_operator.builders.spark`.
The cleanup pod reaches the job's storage the way its driver does, so the operator
itself never needs the job's volumes or credentials.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from cjob_operator.builders.metadata import Manifest, object_metadata
from cjob_operator.builders.placement import shared_placement
from cjob_operator.builders.pod_template import pod_on_template
from cjob_operator.builders.spark import (
    KUBERNETES_MASTER,
    POD_IP_REFERENCE,
    POD_TEMPLATE_DIR,
    POD_TEMPLATE_FILE,
    POD_TEMPLATE_VOLUME,
    SPARK_AUTH_DIR,
    SPARK_AUTH_FILE_KEY,
    driver_spark_conf,
    executor_pod_template,
)
from cjob_operator.config import OperatorConfig
from cjob_spec.driver_env import driver_env as spec_driver_env
from cjob_spec.errors import SpecError
from cjob_spec.model import CheckpointedJob, spec_hash
from cjob_spec.names import (
    ANNOTATION_EXECUTOR_POD_TEMPLATE,
    ANNOTATION_RESTORE,
    ANNOTATION_SPEC_HASH,
    CLEANUP_CONTAINER,
    DRIVER_CONTAINER,
    LABEL_ATTEMPT,
    LABEL_ROLE,
    ROLE_CLEANUP,
    ROLE_DRIVER,
    ROLE_STANDBY,
    checkpoint_configmap_name,
    cleanup_pod_name,
    driver_pod_name,
    service_account_name,
    spark_auth_secret_name,
    standby_pod_name,
)
from cjob_spec.parse import DRIVER_REQUEST_CORES
from cjob_spec.pod_ownership import SPARK_AUTH_VOLUME
from cjob_spec.quantities import MIB, format_kubernetes_memory
from cjob_spec.runtime_args import (
    configmap_store_arg,
    kubelet_literal,
    runtime_settings,
    to_runtime_args,
)
from cjob_spec.security import container_security_context, pod_security_context

CLEANUP_MEMORY = "256Mi"
"""Python with boto3 listing and deleting objects in batches of 1000."""
CLEANUP_CPU = "100m"
TERMINATION_LOG = "/dev/termination-log"
STANDBY_READY_FILE = "checkpointed-jobs-standby.ready"
"""Where a standby pod's driver says it is ready, in its temporary directory (the
runtime takes a relative ``--standby-ready-file`` there); its readiness probe tests
the same file, in the container's ``$TMPDIR`` or ``/tmp``."""
STANDBY_READY_PERIOD_SECONDS = 2
"""Each probe is an exec into the container: cheap, but not free on a small node."""


def driver_memory_request_bytes(job: CheckpointedJob, config: OperatorConfig) -> int:
    """Container memory: the JVM heap plus Spark's usual non-heap overhead."""
    heap = job.spec.spark.driver.memory.bytes
    proportional = -(-int(heap * config.memory_overhead_factor) // MIB) * MIB
    return heap + max(config.min_memory_overhead_bytes, proportional)


def driver_env(job: CheckpointedJob, config: OperatorConfig) -> list[dict[str, Any]]:
    """The driver container's ``env``: ``spec.pod.env``, the pod's identity, then what
    the spec gives every driver (:func:`cjob_spec.driver_env.driver_env`, shared with
    ``cjob run`` so both supervisors pass the same settings), then the operator's extra
    variables."""
    user = [dict(v) for v in job.spec.pod.env]
    env: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    return user + env + _spec_env(job, config)


def storage_env(job: CheckpointedJob, config: OperatorConfig) -> list[dict[str, Any]]:
    """``spec.pod.env``, then what the spec gives every driver, then the operator's
    extra variables: a pod that reaches the job's storage sees what its driver sees.

    Credentials stay references (``secretKeyRef``): the kubelet reads the Secret when
    it starts the container, the operator never does. The parser refuses a variable
    of ``spec.pod.env`` that the operator sets; one of the operator's extra variables
    comes last, so it is the one the container sees.
    """
    return [dict(v) for v in job.spec.pod.env] + _spec_env(job, config)


def _spec_env(job: CheckpointedJob, config: OperatorConfig) -> list[dict[str, Any]]:
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


def storage_container(job: CheckpointedJob, *, name: str, image: str, command: Sequence[str],
                      args: Sequence[str], config: OperatorConfig) -> dict[str, Any]:
    """A short-lived container that reaches the job's storage as its driver does (the
    cleanup and snapshot pods): the job's S3 environment, a small fixed size, the job's
    container security context, and its one-line outcome as the termination message
    (the end of its log should it die without writing one)."""
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": config.image_pull_policy,
        "command": list(command),
        "args": list(args),
        "env": storage_env(job, config),
        **env_from(job),
        "resources": {
            "requests": {"cpu": CLEANUP_CPU, "memory": CLEANUP_MEMORY},
            "limits": {"memory": CLEANUP_MEMORY},
        },
        "securityContext": container_security_context(job.spec.pod.container_security_context),
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def build_cleanup_pod(
    job: CheckpointedJob,
    *,
    uris: Sequence[str],
    image: str,
    deadline_seconds: int,
    operator_config: OperatorConfig,
) -> Manifest:
    """The pod that deletes a deleted job's checkpoint directories ``uris``.

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
    container = storage_container(
        job, name=CLEANUP_CONTAINER, image=image, command=config.cleanup_command,
        args=[*(arg for uri in uris for arg in ("--uri", kubelet_literal(uri))),
              "--job-name", name, "--job-uid", uid, "--termination-log", TERMINATION_LOG],
        config=config)
    if job.spec.pod.volume_mounts:
        container["volumeMounts"] = [dict(m) for m in job.spec.pod.volume_mounts]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": object_metadata(
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
    restore_exact: bool = False,
) -> Manifest:
    """The driver pod of ``attempt``: ``python -m job_runtime run`` with the job's flags.

    ``image`` is what ``plan`` chose: ``spec.image`` or the operator's runtime image.
    """
    args = _runtime_args(job, attempt=attempt, restore_pointer=restore_pointer, image=image,
                         operator_config=operator_config, restore_exact=restore_exact)
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
    restore_exact: bool = False,
) -> list[str]:
    """``python -m job_runtime run`` arguments of a driver pod: the job's settings with
    the ConfigMap store, the master and the operator's Spark settings (for
    ``spark_conf_attempt``, by default ``attempt``)."""
    settings = runtime_settings(
        job,
        restore_pointer=restore_pointer,
        restore_exact=restore_exact,
        attempt=attempt,
        store=configmap_store_arg(namespace=job.metadata.namespace,
                                  name=checkpoint_configmap_name(job.metadata.name)),
        master=KUBERNETES_MASTER if job.spec.spark.is_kubernetes else job.spec.spark.master,
        extra_spark_conf=driver_spark_conf(
            job, attempt=attempt if spark_conf_attempt is None else spark_conf_attempt,
            image=image, config=operator_config, standby=standby),
        metrics_port=operator_config.metrics_port,
        literal=kubelet_literal,
    )
    # With a standby, every driver listens for it at the pod's address (the kubelet
    # substitutes POD_IP, see driver_env), and the standby watches the active one.
    return to_runtime_args(
        settings, beacon_host=POD_IP_REFERENCE if job.spec.standby.enabled else None)


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
        **env_from(job),
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
    return pod_on_template(job.spec.pod.driver_template, {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": object_metadata(
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
    })


def env_from(job: CheckpointedJob) -> dict[str, Any]:
    """The container field of ``spec.pod.envFrom``, when it is given."""
    sources = [dict(source) for source in job.spec.pod.env_from]
    return {"envFrom": sources} if sources else {}


def driver_pod_placement(job: CheckpointedJob) -> dict[str, Any]:
    """The pod fields ``spec.pod`` sets: volumes, node selection, tolerations, priority,
    image pull secrets."""
    pod = job.spec.pod
    fields: dict[str, Any] = {}
    if pod.volumes:
        fields["volumes"] = [dict(v) for v in pod.volumes]
    if pod.node_selector:
        fields["nodeSelector"] = dict(pod.node_selector)
    return {**fields, **shared_placement(pod)}
