"""Manifests: names, labels, owner references, the driver's command line and rights."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml
from cjob_operator.builders import (
    build_checkpoint_configmap,
    build_cleanup_pod,
    build_driver_pod,
    build_driver_service,
    build_role,
    build_role_binding,
    build_service_account,
    build_spark_auth_secret,
    build_standby_pod,
)
from cjob_operator.builders.spark import KUBERNETES_MASTER, POD_TEMPLATE_VOLUME
from cjob_operator.config import OperatorConfig
from cjob_operator.observed import observe_driver_pod
from operator_world import make_job

from cjob_spec import CheckpointedJob, SpecError, parse_job, spec_hash
from cjob_spec.model import CheckpointMode, OnUnreadable
from cjob_spec.names import ANNOTATION_EXECUTOR_POD_TEMPLATE
from cjob_spec.pod_ownership import SPARK_AUTH_VOLUME
from cjob_spec.runtime_settings import RuntimeSettings

CONFIG = OperatorConfig()
STANDARD_LABELS = {
    "app.kubernetes.io/name": "checkpointed-job",
    "app.kubernetes.io/instance": "clicks",
    "app.kubernetes.io/managed-by": "checkpointed-jobs",
    "checkpointed.io/job": "clicks",
}


def args_of(pod: dict[str, Any]) -> list[str]:
    return list(pod["spec"]["containers"][0]["args"])


def value(args: list[str], flag: str) -> str:
    values = [args[i + 1] for i, item in enumerate(args) if item == flag]
    assert len(values) == 1, flag
    return values[0]


def settings_of(args: list[str]) -> RuntimeSettings:
    """The runtime settings a driver pod's arguments carry."""
    return RuntimeSettings.decode(value(args, "--settings"))


def spark_conf(args: list[str]) -> dict[str, str]:
    return dict(settings_of(args).spark_conf)


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item for item in pod["spec"]["containers"][0]["env"]}


def driver_pod(job: CheckpointedJob, **kwargs: Any) -> dict[str, Any]:
    """The driver pod in the job's own image, as ``plan`` chooses when the spec names one."""
    assert job.spec.image is not None
    return build_driver_pod(job, image=job.spec.image, **kwargs)


def all_manifests() -> list[dict[str, Any]]:
    job = make_job()
    return [
        driver_pod(job, attempt=1, restore_pointer="latest", operator_config=CONFIG),
        build_driver_service(job, operator_config=CONFIG),
        build_service_account(job),
        build_role(job),
        build_role_binding(job),
        build_checkpoint_configmap(job),
        cleanup_pod(job),
    ]


def cleanup_pod(job: CheckpointedJob, *, image: str = "example.org/clicks:1.0",
                config: OperatorConfig = CONFIG) -> dict[str, Any]:
    return build_cleanup_pod(job, uris=("s3://ckpt/jobs/clicks-uid-1",), image=image,
                             deadline_seconds=600, operator_config=config)


# --- names, labels, owners -----------------------------------------------------------


def test_objects_have_their_contract_names() -> None:
    names = [(m["kind"], m["metadata"]["name"]) for m in all_manifests()]
    assert names == [
        ("Pod", "clicks-attempt-1"),
        ("Service", "clicks-driver"),
        ("ServiceAccount", "clicks-driver"),
        ("Role", "clicks-driver"),
        ("RoleBinding", "clicks-driver"),
        ("ConfigMap", "clicks-checkpoints"),
        ("Pod", "clicks-cleanup"),
    ]


@pytest.mark.parametrize("manifest", all_manifests(), ids=lambda m: m["metadata"]["name"])
def test_every_object_is_labelled_and_owned_by_its_job(manifest: dict[str, Any]) -> None:
    metadata = manifest["metadata"]
    assert metadata["namespace"] == "team"
    assert STANDARD_LABELS.items() <= metadata["labels"].items()
    assert metadata["ownerReferences"] == [
        {
            "apiVersion": "checkpointed.io/v1alpha1",
            "kind": "CheckpointedJob",
            "name": "clicks",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_objects_cannot_be_built_for_a_job_without_uid() -> None:
    document = {
        "apiVersion": "checkpointed.io/v1alpha1",
        "kind": "CheckpointedJob",
        "metadata": {"name": "clicks"},
        "spec": {
            "image": "i",
            "job": {"entrypoint": "a:b"},
            "checkpoint": {"storage": "file:///c"},
        },
    }
    with pytest.raises(SpecError, match="uid"):
        build_service_account(parse_job(document))


# --- the driver pod ------------------------------------------------------------------


def test_the_driver_pod_runs_the_runtime_with_the_restore_pointer_and_fenced_attempt() -> None:
    job = make_job()
    pod = driver_pod(job, attempt=3, restore_pointer="latest", operator_config=CONFIG)
    metadata = pod["metadata"]
    assert metadata["labels"]["checkpointed.io/attempt"] == "3"
    assert metadata["labels"]["checkpointed.io/role"] == "driver"
    assert metadata["annotations"]["checkpointed.io/spec-hash"] == spec_hash(job)
    assert metadata["annotations"]["checkpointed.io/restore-pointer"] == "latest"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["serviceAccountName"] == "clicks-driver"
    container = spec["containers"][0]
    assert container["name"] == "driver"
    assert container["image"] == "example.org/clicks:1.0"
    assert container["command"] == ["python", "-m", "job_runtime", "run"]
    args = args_of(pod)
    assert settings_of(args).restore == "latest"
    assert settings_of(args).attempt == 3
    assert settings_of(args).store == "configmap:team/clicks-checkpoints"
    assert settings_of(args).job_uid == "uid-1"
    assert settings_of(args).metrics_port == 9108


def test_every_checkpoint_setting_reaches_the_driver() -> None:
    job = make_job(
        checkpoint={
            "storage": "file:///data/ckpt",
            "interval": "30s",
            "minPause": "2s",
            "timeout": "1m",
            "mode": "AtLeastOnce",
            "retained": 4,
            "tolerableFailures": 2,
        },
        restore={"from": 9, "onUnreadable": "FallbackToPrevious"},
    )
    args = args_of(driver_pod(job, attempt=1, restore_pointer="9", operator_config=CONFIG))
    assert settings_of(args).checkpoint_storage == "file:///data/ckpt"
    assert settings_of(args).checkpoint_interval == 30
    assert settings_of(args).checkpoint_min_pause == 2
    assert settings_of(args).checkpoint_timeout == 60
    assert settings_of(args).checkpoint_mode is CheckpointMode.AT_LEAST_ONCE
    assert not settings_of(args).unaligned
    assert settings_of(args).retained == 4
    assert settings_of(args).tolerable_failures == 2
    assert settings_of(args).restore == "9"
    assert settings_of(args).on_unreadable is OnUnreadable.FALLBACK_TO_PREVIOUS


def test_a_kubernetes_master_driver_creates_executors_that_call_back_through_its_service() -> None:
    job = make_job(spark={"executor": {"instances": 2, "cores": 2, "memory": "4Gi"}})
    args = args_of(
        driver_pod(job, attempt=2, restore_pointer="latest", operator_config=CONFIG)
    )
    assert settings_of(args).master == KUBERNETES_MASTER
    assert (
        KUBERNETES_MASTER == "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"
    )
    conf = spark_conf(args)
    assert conf["spark.submit.deployMode"] == "client"
    assert conf["spark.kubernetes.namespace"] == "team"
    assert conf["spark.kubernetes.driver.pod.name"] == "clicks-attempt-2"
    assert conf["spark.driver.host"] == "clicks-driver.team.svc"
    assert conf["spark.driver.port"] == "7078"
    assert conf["spark.driver.blockManager.port"] == "7079"
    assert conf["spark.kubernetes.container.image"] == "example.org/clicks:1.0"
    assert conf["spark.executor.instances"] == "2"
    assert conf["spark.executor.cores"] == "2"
    assert conf["spark.executor.memory"] == "4096m"
    assert conf["spark.kubernetes.executor.label.checkpointed.io/job"] == "clicks"
    assert conf["spark.kubernetes.executor.label.checkpointed.io/role"] == "executor"
    assert conf["spark.kubernetes.executor.podNamePrefix"] == "clicks-2"
    assert conf["spark.kubernetes.authenticate.oauthTokenFile"].endswith("/token")


def test_executors_dial_the_driver_at_its_pod_ip_because_spark_hands_them_the_bind_address() -> (
    None
):
    job = make_job(spark={"executor": {"instances": 2, "cores": 1, "memory": "1Gi"}})
    pod = driver_pod(job, attempt=1, restore_pointer="latest", operator_config=CONFIG)
    conf = spark_conf(args_of(pod))
    # Spark 4.1+ (spark.kubernetes.executor.useDriverPodIP, on by default) builds the
    # executors' driver URL from the bind address: 0.0.0.0 there sent every executor
    # to its own loopback. The kubelet expands $(POD_IP) from the container's env.
    assert conf["spark.driver.bindAddress"] == "$(POD_IP)"
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_a_local_master_driver_runs_everything_in_its_pod() -> None:
    job = make_job(spark={"master": "local[2,3]", "conf": {"spark.ui.enabled": "false"}})
    pod = driver_pod(job, attempt=1, restore_pointer="latest", operator_config=CONFIG)
    args = args_of(pod)
    assert settings_of(args).master == "local[2,3]"
    conf = spark_conf(args)
    assert not any(key.startswith("spark.kubernetes.") for key in conf)
    assert "spark.driver.host" not in conf and "spark.executor.instances" not in conf
    assert conf["spark.ui.enabled"] == "false"
    ports = {port["name"] for port in pod["spec"]["containers"][0]["ports"]}
    assert "driver-rpc" not in ports


@pytest.mark.parametrize(
    ("memory", "heap", "container"),
    [("1Gi", "1024m", "1408Mi"), ("2Gi", "2048m", "2432Mi"), ("8Gi", "8192m", "9012Mi")],
)
def test_the_driver_container_has_room_for_the_heap_and_its_overhead(
    memory: str, heap: str, container: str
) -> None:
    job = make_job(spark={"driver": {"cores": 2, "memory": memory}, "executor": {"instances": 2}})
    pod = driver_pod(job, attempt=1, restore_pointer="latest", operator_config=CONFIG)
    assert spark_conf(args_of(pod))["spark.driver.memory"] == heap
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"]["memory"] == resources["limits"]["memory"]
    assert resources["requests"]["cpu"] == "2"
    assert resources["limits"]["memory"] == container
    assert "cpu" not in resources["limits"]


def test_s3_credentials_come_from_the_secret_and_the_endpoint_from_the_spec() -> None:
    job = make_job(
        checkpoint={
            "storage": "s3://ckpt/jobs",
            "s3": {"endpoint": "http://minio:9000", "region": "eu-1", "credentialsSecret": "creds"},
        }
    )
    env = env_of(driver_pod(job, attempt=1, restore_pointer="latest", operator_config=CONFIG))
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[key] == {
            "name": key,
            "valueFrom": {"secretKeyRef": {"name": "creds", "key": key}},
        }
    assert env["AWS_ENDPOINT_URL"]["value"] == "http://minio:9000"
    assert env["AWS_REGION"]["value"] == "eu-1"
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_file_storage_puts_no_s3_settings_in_the_environment() -> None:
    job = make_job(checkpoint={"storage": "file:///data/ckpt"})
    env = env_of(driver_pod(job, attempt=1, restore_pointer="latest", operator_config=CONFIG))
    assert not any(name.startswith("AWS_") for name in env)


def test_the_operator_config_shapes_the_driver() -> None:
    config = OperatorConfig(
        runtime_command=("/venv/bin/python", "-m", "job_runtime", "run"),
        image_pull_policy="Never",
        metrics_port=9999,
        extra_env={"HTTP_PROXY": "http://proxy:3128"},
    )
    pod = driver_pod(make_job(), attempt=1, restore_pointer="latest", operator_config=config)
    container = pod["spec"]["containers"][0]
    assert container["command"][0] == "/venv/bin/python"
    assert container["imagePullPolicy"] == "Never"
    assert settings_of(args_of(pod)).metrics_port == 9999
    assert env_of(pod)["HTTP_PROXY"]["value"] == "http://proxy:3128"


def test_an_observed_driver_pod_reads_back_the_attempt_and_spec_hash_it_was_built_with() -> None:
    job = make_job()
    pod = driver_pod(job, attempt=4, restore_pointer="latest", operator_config=CONFIG)
    pod["metadata"]["creationTimestamp"] = "2024-05-01T12:00:00Z"
    observed = observe_driver_pod(pod)
    assert observed is not None
    assert (observed.name, observed.attempt, observed.phase) == ("clicks-attempt-4", 4, "Pending")
    assert observed.spec_hash == spec_hash(job)


# --- service and rights --------------------------------------------------------------


def test_the_driver_service_is_headless_and_selects_only_driver_pods() -> None:
    service = build_driver_service(make_job(), operator_config=CONFIG)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {
        "checkpointed.io/job": "clicks",
        "checkpointed.io/role": "driver",
    }
    ports = {port["name"]: port["port"] for port in service["spec"]["ports"]}
    assert ports["driver-rpc"] == 7078 and ports["blockmanager"] == 7079


def rules_for(role: dict[str, Any], resource: str) -> list[dict[str, Any]]:
    return [rule for rule in role["rules"] if resource in rule["resources"]]


def test_the_driver_role_is_least_privilege() -> None:
    role = build_role(make_job())
    assert role["kind"] == "Role"  # namespaced, never a ClusterRole
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert "*" not in rule["apiGroups"]
        assert not {"secrets", "roles", "rolebindings", "serviceaccounts"} & set(rule["resources"])
    store_rules = [r for r in rules_for(role, "configmaps") if "resourceNames" in r]
    assert store_rules == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["clicks-checkpoints"],
            # list and watch by name only: a standby driver watches for its promotion.
            "verbs": ["get", "list", "watch", "update", "patch"],
        }
    ]
    other_configmap_verbs = {
        verb
        for rule in rules_for(role, "configmaps")
        if "resourceNames" not in rule
        for verb in rule["verbs"]
    }
    assert other_configmap_verbs == set()   # Spark's executor ConfigMap is switched off
    (pods,) = rules_for(role, "pods")
    assert set(pods["verbs"]) == {"create", "get", "list", "watch", "delete", "deletecollection"}
    assert all("create" in rule["verbs"] for rule in rules_for(role, "events"))


def test_a_local_mode_driver_may_not_touch_pods() -> None:
    role = build_role(make_job(spark={"master": "local[2]"}))
    assert rules_for(role, "pods") == []
    assert all("resourceNames" in rule for rule in rules_for(role, "configmaps"))


def test_the_role_binding_grants_the_role_to_the_driver_account_only() -> None:
    binding = build_role_binding(make_job())
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "clicks-driver",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "clicks-driver", "namespace": "team"}
    ]


def test_the_checkpoint_configmap_starts_empty_and_fenced() -> None:
    configmap = build_checkpoint_configmap(make_job(), fence_attempt=2)
    assert configmap["data"] == {}
    assert configmap["metadata"]["annotations"] == {"checkpointed.io/fence-attempt": "2"}
    assert configmap["metadata"]["labels"]["checkpointed.io/job"] == "clicks"


# --- spec.pod: placement and volumes -------------------------------------------------------

CHECKPOINT_VOLUMES = {
    "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}},
                {"name": "scratch", "emptyDir": {}}],
    "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt", "subPath": "jobs"},
                     {"name": "scratch", "mountPath": "/scratch"}],
}


def test_pod_settings_reach_the_driver_pod() -> None:
    toleration = {"key": "spark", "operator": "Exists", "effect": "NoSchedule"}
    job = make_job(pod={**CHECKPOINT_VOLUMES, "nodeSelector": {"pool": "spark"},
                        "tolerations": [toleration],
                        "affinity": {"nodeAffinity": {"x": 1}}, "priorityClassName": "batch"})
    spec = driver_pod(job, attempt=1, restore_pointer="latest",
                            operator_config=CONFIG)["spec"]
    ours = (POD_TEMPLATE_VOLUME, SPARK_AUTH_VOLUME)
    user_volumes = [v for v in spec["volumes"] if v["name"] not in ours]
    user_mounts = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] not in ours]
    assert user_volumes == CHECKPOINT_VOLUMES["volumes"]
    assert user_mounts == CHECKPOINT_VOLUMES["volumeMounts"]
    assert spec["nodeSelector"] == {"pool": "spark"}
    assert spec["tolerations"] == [toleration]
    assert spec["affinity"] == {"nodeAffinity": {"x": 1}}
    assert spec["priorityClassName"] == "batch"


def test_a_driver_pod_without_pod_settings_has_no_placement_fields() -> None:
    spec = driver_pod(make_job(), attempt=1, restore_pointer="latest",
                            operator_config=CONFIG)["spec"]
    assert not {"nodeSelector", "tolerations", "affinity", "priorityClassName"} & set(spec)
    assert [v["name"] for v in spec["volumes"]] == [POD_TEMPLATE_VOLUME, SPARK_AUTH_VOLUME]
    local = make_job(spark={"master": "local[2]"})
    spec = driver_pod(local, attempt=1, restore_pointer="latest", operator_config=CONFIG)["spec"]
    assert "volumes" not in spec
    assert "volumeMounts" not in spec["containers"][0]


def test_executors_on_kubernetes_mount_the_persistent_volumes_and_follow_the_node_selector(
) -> None:
    job = make_job(pod={**CHECKPOINT_VOLUMES, "nodeSelector": {"pool": "spark"}})
    conf = spark_conf(args_of(driver_pod(job, attempt=1, restore_pointer="latest",
                                               operator_config=CONFIG)))
    prefix = "spark.kubernetes.executor.volumes.persistentVolumeClaim.ckpt"
    assert conf[f"{prefix}.mount.path"] == "/ckpt"
    assert conf[f"{prefix}.mount.readOnly"] == "false"
    assert conf[f"{prefix}.mount.subPath"] == "jobs"
    assert conf[f"{prefix}.options.claimName"] == "checkpoints"
    assert not [key for key in conf if ".emptyDir." in key], "scratch space is not shared"
    assert conf["spark.kubernetes.node.selector.pool"] == "spark"


def test_a_local_mode_driver_gets_no_executor_volume_settings() -> None:
    job = make_job(pod=CHECKPOINT_VOLUMES, **{"spark.master": "local[2]"})
    conf = spark_conf(args_of(driver_pod(job, attempt=1, restore_pointer="latest",
                                               operator_config=CONFIG)))
    assert not [key for key in conf if key.startswith("spark.kubernetes.")]


# --- pod security ----------------------------------------------------------------------


def test_the_driver_pod_and_container_carry_the_restricted_security_contexts() -> None:
    pod = driver_pod(make_job(), attempt=1, restore_pointer="latest", operator_config=CONFIG)
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] == 185
    container = pod["spec"]["containers"][0]["securityContext"]
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"] == {"drop": ["ALL"]}


def test_executors_start_from_a_template_the_driver_pod_mounts_from_its_annotation() -> None:
    job = make_job(pod={"securityContext": {"runAsUser": 1000}})
    pod = driver_pod(job, attempt=1, restore_pointer="latest", operator_config=CONFIG)
    conf = spark_conf(args_of(pod))
    template = yaml.safe_load(pod["metadata"]["annotations"][ANNOTATION_EXECUTOR_POD_TEMPLATE])
    assert template["spec"]["securityContext"] == pod["spec"]["securityContext"]
    assert template["spec"]["securityContext"]["runAsUser"] == 1000
    assert (template["spec"]["containers"][0]["securityContext"]
            == pod["spec"]["containers"][0]["securityContext"])
    mount = next(m for m in pod["spec"]["containers"][0]["volumeMounts"]
                 if m["name"] == POD_TEMPLATE_VOLUME)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == POD_TEMPLATE_VOLUME)
    item = volume["downwardAPI"]["items"][0]
    assert f"{mount['mountPath']}/{item['path']}" == conf[
        "spark.kubernetes.executor.podTemplateFile"]
    assert ANNOTATION_EXECUTOR_POD_TEMPLATE in item["fieldRef"]["fieldPath"]
    assert conf["spark.kubernetes.executor.disableConfigMap"] == "true"


def test_spark_rpc_authenticates_with_the_jobs_secret_mounted_as_a_file() -> None:
    """Spark would otherwise put a generated secret into every executor's pod spec."""
    pod = driver_pod(make_job(), attempt=1, restore_pointer="latest", operator_config=CONFIG)
    conf = spark_conf(args_of(pod))
    mount = next(m for m in pod["spec"]["containers"][0]["volumeMounts"]
                 if m["name"] == SPARK_AUTH_VOLUME)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == SPARK_AUTH_VOLUME)
    assert volume["secret"]["secretName"] == "clicks-spark-auth"
    assert mount["readOnly"] is True
    key_file = f"{mount['mountPath']}/key"
    assert conf["spark.authenticate.secret.driver.file"] == key_file
    assert conf["spark.authenticate.secret.executor.file"] == key_file
    assert conf["spark.kubernetes.executor.secretKeyRef._SPARK_AUTH_SECRET"] == \
        "clicks-spark-auth:key.base64"
    secret = build_spark_auth_secret(make_job(), key=bytes(range(32)))
    assert secret["metadata"]["name"] == "clicks-spark-auth"
    raw = base64.b64decode(secret["data"]["key"])
    assert raw == bytes(range(32))
    # What Spark makes of a key file (base64 of its bytes) is what executors get.
    assert base64.b64decode(secret["data"]["key.base64"]) == base64.b64encode(raw)
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "CheckpointedJob"
    with pytest.raises(ValueError):
        build_spark_auth_secret(make_job(), key=b"short")


def test_a_local_driver_has_no_executor_template() -> None:
    job = make_job(spark={"master": "local[2]"})
    pod = driver_pod(job, attempt=1, restore_pointer="latest", operator_config=CONFIG)
    assert ANNOTATION_EXECUTOR_POD_TEMPLATE not in pod["metadata"]["annotations"]
    assert "spark.kubernetes.executor.podTemplateFile" not in spark_conf(args_of(pod))


@pytest.mark.parametrize("key", ["spark.kubernetes.executor.podTemplateFile",
                                 "spark.kubernetes.executor.disableConfigMap"])
def test_the_template_and_configmap_settings_are_the_operators(key: str) -> None:
    with pytest.raises(SpecError, match="is managed by the operator"):
        make_job(spark={"conf": {key: "x"}})


# --- the cleanup pod -------------------------------------------------------------------


def test_the_cleanup_pod_runs_the_cleanup_command_for_exactly_the_jobs_directory() -> None:
    pod = cleanup_pod(make_job())
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "job_runtime", "cleanup"]
    assert container["args"] == ["--uri", "s3://ckpt/jobs/clicks-uid-1", "--job-name", "clicks",
                                 "--job-uid", "uid-1", "--termination-log", "/dev/termination-log"]
    assert container["image"] == "example.org/clicks:1.0"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert pod["metadata"]["labels"]["checkpointed.io/role"] == "cleanup"
    assert "checkpointed.io/attempt" not in pod["metadata"]["labels"]
    assert observe_driver_pod(pod) is None, "never mistaken for a driver"


def test_the_cleanup_pod_is_given_every_storage_root_the_job_used() -> None:
    roots = ("s3://old/clicks-uid-1", "s3://ckpt/jobs/clicks-uid-1")
    pod = build_cleanup_pod(make_job(), uris=roots, image="example.org/clicks:1.0",
                            deadline_seconds=600, operator_config=CONFIG)
    args = pod["spec"]["containers"][0]["args"]
    assert args[:4] == ["--uri", "s3://old/clicks-uid-1", "--uri", "s3://ckpt/jobs/clicks-uid-1"]


def test_the_cleanup_pod_runs_once_within_a_deadline_and_without_api_access() -> None:
    spec = cleanup_pod(make_job())["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 600
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec


def test_the_cleanup_pod_gets_the_credentials_as_secret_references_only() -> None:
    job = make_job(checkpoint={
        "storage": "s3://ckpt/jobs",
        "s3": {"endpoint": "http://minio:9000", "region": "eu-1", "credentialsSecret": "creds"},
    })
    cleanup = env_of(cleanup_pod(job))
    driver = env_of(driver_pod(job, attempt=1, restore_pointer="latest", operator_config=CONFIG))
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert cleanup[key] == {"name": key, "valueFrom": {"secretKeyRef": {"name": "creds",
                                                                             "key": key}}}
    aws = {name: item for name, item in driver.items() if name.startswith("AWS_")}
    assert {name: item for name, item in cleanup.items() if name.startswith("AWS_")} == aws
    assert all("value" not in cleanup[key] for key in ("AWS_ACCESS_KEY_ID",
                                                       "AWS_SECRET_ACCESS_KEY"))


def test_the_cleanup_pod_reaches_file_checkpoints_on_the_jobs_volumes_and_nodes() -> None:
    toleration = {"key": "spark", "operator": "Exists", "effect": "NoSchedule"}
    job = make_job(checkpoint={"storage": "file:///ckpt"},
                   pod={**CHECKPOINT_VOLUMES, "nodeSelector": {"pool": "spark"},
                        "tolerations": [toleration]})
    spec = cleanup_pod(job)["spec"]
    assert spec["volumes"] == CHECKPOINT_VOLUMES["volumes"]
    assert spec["containers"][0]["volumeMounts"] == CHECKPOINT_VOLUMES["volumeMounts"]
    assert spec["nodeSelector"] == {"pool": "spark"}
    assert spec["tolerations"] == [toleration]


def test_the_cleanup_pod_has_the_drivers_security_contexts() -> None:
    job = make_job(pod={"securityContext": {"runAsUser": 1000},
                        "containerSecurityContext": {"readOnlyRootFilesystem": True}})
    cleanup = cleanup_pod(job)["spec"]
    driver = driver_pod(job, attempt=1, restore_pointer="latest", operator_config=CONFIG)["spec"]
    assert cleanup["securityContext"] == driver["securityContext"]
    assert cleanup["containers"][0]["securityContext"] == driver["containers"][0][
        "securityContext"]
    assert cleanup["securityContext"]["runAsUser"] == 1000


# --- the standby driver pod -------------------------------------------------------------------


def test_a_standby_pod_runs_its_own_spark_beside_the_attempt_it_may_replace() -> None:
    job = make_job()
    config = OperatorConfig()
    driver = build_driver_pod(job, attempt=3, restore_pointer="latest", image="img",
                              operator_config=config)
    standby = build_standby_pod(job, attempt=3, image="img", operator_config=config)
    assert standby["metadata"]["name"] == "clicks-standby-3"
    assert standby["metadata"]["labels"]["checkpointed.io/role"] == "standby"
    conf = spark_conf(standby["spec"]["containers"][0]["args"])
    driver_conf = spark_conf(driver["spec"]["containers"][0]["args"])
    # Its executors are its own (owned by its pod, named apart from the attempt's) and
    # reach it at its pod address: the driver Service selects the promoted driver only.
    assert conf["spark.kubernetes.driver.pod.name"] == "clicks-standby-3"
    assert conf["spark.kubernetes.executor.podNamePrefix"] \
        != driver_conf["spark.kubernetes.executor.podNamePrefix"]
    assert conf["spark.driver.host"] == "$(POD_IP)"
    assert observe_driver_pod(standby) is not None
    observed = observe_driver_pod(standby)
    assert observed is not None and observed.standby and not observed.ready


def test_a_standby_pod_is_observed_ready_only_once_its_readiness_probe_passed() -> None:
    standby = build_standby_pod(make_job(), attempt=1, image="img",
                                operator_config=OperatorConfig())
    standby["status"] = {"phase": "Running", "conditions": [
        {"type": "ContainersReady", "status": "True"}, {"type": "Ready", "status": "True"}]}
    observed = observe_driver_pod(standby)
    assert observed is not None and observed.ready
    standby["status"]["conditions"][1]["status"] = "False"
    observed = observe_driver_pod(standby)
    assert observed is not None and not observed.ready


def test_with_a_standby_every_driver_listens_for_it_at_its_pod_address() -> None:
    job = make_job(standby={"enabled": True})
    config = OperatorConfig()
    for pod in (build_driver_pod(job, attempt=1, restore_pointer="latest", image="img",
                                 operator_config=config),
                build_standby_pod(job, attempt=1, image="img", operator_config=config)):
        args = pod["spec"]["containers"][0]["args"]
        assert args[args.index("--beacon-host") + 1] == "$(POD_IP)"
        assert "POD_IP" in [env["name"] for env in pod["spec"]["containers"][0]["env"]]
    plain = build_driver_pod(make_job(), attempt=1, restore_pointer="latest", image="img",
                             operator_config=config)
    assert "--beacon-host" not in plain["spec"]["containers"][0]["args"]


def test_the_driver_pods_cpu_request_follows_sparks_own_setting_when_given() -> None:
    config = OperatorConfig()
    job = make_job(spark={"master": "k8s", "executor": {"instances": 2},
                          "conf": {"spark.kubernetes.driver.request.cores": "300m"}})
    for pod in (build_driver_pod(job, attempt=1, restore_pointer="latest", image="img",
                                 operator_config=config),
                build_standby_pod(job, attempt=1, image="img", operator_config=config)):
        assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "300m"
    plain = build_driver_pod(make_job(), attempt=1, restore_pointer="latest", image="img",
                             operator_config=config)
    assert plain["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1"


def kubelet_expanded(text: str, env: dict[str, str]) -> str:
    """What the kubelet makes of a container argument: ``$$`` is ``$``, ``$(NAME)`` is
    the variable's value when the container defines it (else left as written), and any
    other ``$`` stays (Kubernetes' expansion rules, for a test without a kubelet; the
    real-node scenario checks a real one)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            close = text.find(")", i + 2)
            name = text[i + 2:close] if close >= 0 else ""
            if close >= 0 and name in env:
                out.append(env[name])
                i = close + 1
            else:
                out.append("$(")
                i += 2
        else:
            out.append("$")
            i += 1
    return "".join(out)


def test_kubelet_expansion_as_modelled_by_these_tests() -> None:
    env = {"HOSTNAME": "pod-1"}
    assert kubelet_expanded("$$5 $(HOSTNAME) $(NOPE) $x $", env) == "$5 pod-1 $(NOPE) $x $"


class TestUserStringsReachTheRuntimeByteForByte:
    """The kubelet expands ``$(VAR)`` and turns ``$$`` into ``$`` in container args;
    the embedded runner does neither. What a user wrote must reach the job alike."""

    ENV = {"HOSTNAME": "driver-pod", "POD_NAME": "driver-pod", "POD_IP": "10.1.2.3",
           "KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    TRICKY = "$$5 $(HOSTNAME) $(POD_NAME) $x $"

    def _job(self) -> CheckpointedJob:
        return make_job(**{
            "job.args": {"x": self.TRICKY, "output": "s3://out/$(POD_NAME)"},
            "job.pythonPath": ["/opt/jobs/$(HOSTNAME)"],
            "job.entrypoint": "clicks.job:build",
            "checkpoint.storage": "s3://ckpt/jobs/$(POD_NAME)/$$",
            "spark.conf": {"spark.user.setting": self.TRICKY},
            "standby": {"enabled": True},
            "spark.master": "k8s",
        })

    def _expanded_args(self, pod: dict[str, Any]) -> list[str]:
        return [kubelet_expanded(arg, self.ENV) for arg in args_of(pod)]

    def test_job_args_storage_python_path_and_spark_conf_arrive_as_written(self) -> None:
        job = self._job()
        for pod in (driver_pod(job, attempt=1, restore_pointer="latest", operator_config=CONFIG),
                    build_standby_pod(job, attempt=1, image=job.spec.image or "",
                                      operator_config=CONFIG)):
            args = self._expanded_args(pod)
            assert settings_of(args).args == {
                "x": self.TRICKY, "output": "s3://out/$(POD_NAME)"}
            assert settings_of(args).checkpoint_storage == "s3://ckpt/jobs/$(POD_NAME)/$$"
            assert settings_of(args).python_path == ("/opt/jobs/$(HOSTNAME)",)
            assert spark_conf(args)["spark.user.setting"] == self.TRICKY

    def test_the_operators_own_references_are_still_expanded(self) -> None:
        job = self._job()
        pod = build_standby_pod(job, attempt=1, image=job.spec.image or "",
                                operator_config=CONFIG)
        args = self._expanded_args(pod)
        assert settings_of(args).master == "k8s://https://10.0.0.1:443"
        assert value(args, "--beacon-host") == "10.1.2.3"
        assert spark_conf(args)["spark.driver.bindAddress"] == "10.1.2.3"

    def test_a_restore_path_arrives_as_written(self) -> None:
        job = self._job()
        pointer = "s3://ckpt/old/$(POD_NAME)/chk-3/_metadata"
        pod = driver_pod(job, attempt=1, restore_pointer=pointer, operator_config=CONFIG)
        assert settings_of(self._expanded_args(pod)).restore == pointer

    def test_a_redeploys_driver_is_told_to_restore_the_point_exactly(self) -> None:
        job = self._job()
        pointer = "s3://ckpt/jobs/snapshots/keep-u1/clicks-uid-1/chk-3/_metadata"
        plain = driver_pod(job, attempt=2, restore_pointer="latest", operator_config=CONFIG)
        assert settings_of(self._expanded_args(plain)).restore_exact is False
        pod = driver_pod(job, attempt=2, restore_pointer=pointer, restore_exact=True,
                         operator_config=CONFIG)
        settings = settings_of(self._expanded_args(pod))
        assert (settings.restore, settings.restore_exact) == (pointer, True)

    def test_the_cleanup_pod_deletes_the_storage_root_as_written(self) -> None:
        pod = build_cleanup_pod(self._job(), uris=("s3://ckpt/jobs/$(POD_NAME)/clicks-uid-1",),
                                image="example.org/clicks:1.0", deadline_seconds=600,
                                operator_config=CONFIG)
        assert value(self._expanded_args(pod), "--uri") == "s3://ckpt/jobs/$(POD_NAME)/clicks-uid-1"
