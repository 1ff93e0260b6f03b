"""Pods built on ``spec.pod`` and the role templates: what every pod of the job gets
(the executors Spark creates included), and what a template adds beside the operator's."""

from __future__ import annotations

from typing import Any

import yaml
from cjob_operator.builders import build_cleanup_pod, build_driver_pod, build_standby_pod
from cjob_operator.config import OperatorConfig
from operator_world import make_job

from cjob_spec import CheckpointedJob
from cjob_spec.names import ANNOTATION_EXECUTOR_POD_TEMPLATE

CONFIG = OperatorConfig()
KAFKA_SECRET = {"secretRef": {"name": "kafka-credentials"}}
TLS_VOLUME = {"name": "kafka-tls", "secret": {"secretName": "kafka-tls"}}
PVC = {"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}}
SHARED = {
    "env": [{"name": "LOG_LEVEL", "value": "debug"}],
    "envFrom": [KAFKA_SECRET],
    "imagePullSecrets": [{"name": "registry"}],
    "volumes": [TLS_VOLUME, PVC],
    "volumeMounts": [{"name": "kafka-tls", "mountPath": "/tls", "readOnly": True},
                     {"name": "ckpt", "mountPath": "/ckpt"}],
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "spark",
                     "effect": "NoSchedule"}],
    "priorityClassName": "streaming",
}


def driver_of(job: CheckpointedJob) -> dict[str, Any]:
    assert job.spec.image is not None
    return build_driver_pod(job, attempt=1, restore_pointer="latest", image=job.spec.image,
                            operator_config=CONFIG)


def executor_template_of(pod: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = yaml.safe_load(
        pod["metadata"]["annotations"][ANNOTATION_EXECUTOR_POD_TEMPLATE])
    return template


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in pod["spec"]["containers"] if c["name"] == name)
    return found


def env_names(of: dict[str, Any]) -> list[str]:
    return [variable["name"] for variable in of.get("env", [])]


# --- spec.pod reaches every pod ---------------------------------------------------------


def test_the_driver_gets_the_variables_secrets_and_pull_secrets_of_spec_pod() -> None:
    pod = driver_of(make_job(pod=SHARED))
    driver = container(pod, "driver")
    names = env_names(driver)
    assert names[0] == "LOG_LEVEL"
    # The operator's own variables come after the user's, so they are what the pod sees.
    assert names.index("POD_IP") > names.index("LOG_LEVEL")
    assert driver["envFrom"] == [KAFKA_SECRET]
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["spec"]["priorityClassName"] == "streaming"


def test_executors_get_variables_secrets_volumes_and_placement_of_spec_pod_too() -> None:
    template = executor_template_of(driver_of(make_job(pod=SHARED)))
    executor = container(template, "spark-kubernetes-executor")
    assert executor["env"] == SHARED["env"]
    assert executor["envFrom"] == [KAFKA_SECRET]
    # A Secret volume goes through the template; a persistent one through Spark's
    # settings, as before (so it is not mounted twice).
    assert template["spec"]["volumes"] == [TLS_VOLUME]
    assert executor["volumeMounts"] == [SHARED["volumeMounts"][0]]
    assert template["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    assert template["spec"]["tolerations"] == SHARED["tolerations"]
    assert template["spec"]["priorityClassName"] == "streaming"


def test_the_standby_and_the_cleanup_pod_get_them_as_the_driver_does() -> None:
    job = make_job(pod=SHARED)
    assert job.spec.image is not None
    standby = build_standby_pod(job, attempt=1, image=job.spec.image, operator_config=CONFIG)
    assert container(standby, "driver")["envFrom"] == [KAFKA_SECRET]
    assert standby["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    cleanup = build_cleanup_pod(job, uris=["s3://ckpt/jobs/x"], image=job.spec.image,
                                deadline_seconds=60, operator_config=CONFIG)
    (only,) = cleanup["spec"]["containers"]
    assert only["envFrom"] == [KAFKA_SECRET] and "LOG_LEVEL" in env_names(only)
    assert cleanup["spec"]["imagePullSecrets"] == [{"name": "registry"}]


def test_a_job_without_them_builds_the_same_pods_as_before() -> None:
    pod = driver_of(make_job())
    assert "envFrom" not in container(pod, "driver")
    assert "imagePullSecrets" not in pod["spec"]
    template = executor_template_of(pod)
    assert set(template["spec"]) == {"securityContext", "containers"}
    assert set(container(template, "spark-kubernetes-executor")) == {"name", "securityContext"}


# --- templates ---------------------------------------------------------------------------


DRIVER_TEMPLATE = {
    "metadata": {"labels": {"team": "ads"}, "annotations": {"owner": "ads@example.org"}},
    "spec": {
        "hostAliases": [{"ip": "10.0.0.7", "hostnames": ["broker"]}],
        "volumes": [{"name": "proxy-config", "configMap": {"name": "proxy"}}],
        "initContainers": [{"name": "wait", "image": "busybox:1"}],
        "containers": [
            {"name": "proxy", "image": "proxy:1"},
            {"name": "driver", "env": [{"name": "TEMPLATE_VAR", "value": "1"}],
             "volumeMounts": [{"name": "proxy-config", "mountPath": "/proxy"}],
             "livenessProbe": {"tcpSocket": {"port": 4040}}},
        ],
    },
}


def test_the_driver_is_built_on_its_template_with_the_operators_fields_over_it() -> None:
    job = make_job(pod={**SHARED, "driverTemplate": DRIVER_TEMPLATE})
    plain = driver_of(make_job(pod=SHARED))
    pod = driver_of(job)
    # The template's labels and annotations join the operator's.
    assert pod["metadata"]["labels"]["team"] == "ads"
    assert pod["metadata"]["labels"]["checkpointed.io/job"] == "clicks"
    assert pod["metadata"]["annotations"]["owner"] == "ads@example.org"
    assert "checkpointed.io/spec-hash" in pod["metadata"]["annotations"]
    # What only the template sets stays; what the operator sets is the operator's.
    assert pod["spec"]["hostAliases"] == DRIVER_TEMPLATE["spec"]["hostAliases"]
    assert pod["spec"]["initContainers"] == DRIVER_TEMPLATE["spec"]["initContainers"]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["serviceAccountName"] == plain["spec"]["serviceAccountName"]
    # The job's container comes first, the template's others beside it.
    assert [c["name"] for c in pod["spec"]["containers"]] == ["driver", "proxy"]
    driver = container(pod, "driver")
    assert driver["livenessProbe"] == {"tcpSocket": {"port": 4040}}
    assert driver["args"] == container(plain, "driver")["args"]
    assert env_names(driver)[0] == "TEMPLATE_VAR"
    assert env_names(driver)[1:] == env_names(container(plain, "driver"))
    assert {"name": "proxy-config", "mountPath": "/proxy"} in driver["volumeMounts"]
    assert next(v["name"] for v in pod["spec"]["volumes"]) == "proxy-config"
    assert {v["name"] for v in plain["spec"]["volumes"]} < {v["name"] for v in pod["spec"]["volumes"]}


def test_the_standby_is_built_on_the_driver_template_too() -> None:
    job = make_job(pod={"driverTemplate": DRIVER_TEMPLATE})
    assert job.spec.image is not None
    standby = build_standby_pod(job, attempt=1, image=job.spec.image, operator_config=CONFIG)
    assert [c["name"] for c in standby["spec"]["containers"]] == ["driver", "proxy"]
    assert "readinessProbe" in container(standby, "driver")


def test_executors_are_built_on_their_template() -> None:
    template_of_user = {
        "metadata": {"labels": {"pool": "spot"}},
        "spec": {
            "tolerations": [{"key": "spot", "operator": "Exists"}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                           "whenUnsatisfiable": "ScheduleAnyway"}],
            "containers": [{"name": "spark-kubernetes-executor",
                            "envFrom": [{"configMapRef": {"name": "tuning"}}]}],
        },
    }
    job = make_job(pod={**SHARED, "executorTemplate": template_of_user})
    template = executor_template_of(driver_of(job))
    assert template["metadata"]["labels"] == {"pool": "spot", "checkpointed.io/job": "clicks",
                                              "checkpointed.io/role": "executor"}
    assert template["spec"]["tolerations"] == [{"key": "spot", "operator": "Exists"},
                                               *SHARED["tolerations"]]
    assert template["spec"]["topologySpreadConstraints"][0]["maxSkew"] == 1
    executor = container(template, "spark-kubernetes-executor")
    assert executor["envFrom"] == [{"configMapRef": {"name": "tuning"}}, KAFKA_SECRET]
    assert executor["securityContext"]["allowPrivilegeEscalation"] is False
