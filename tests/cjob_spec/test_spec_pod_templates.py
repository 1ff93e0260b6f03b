"""``spec.pod``'s variables, pull secrets and role templates: what a template may give
the driver's and executors' pods, and the one-line refusal of what the operator sets."""

from __future__ import annotations

from typing import Any

import pytest
from spec_documents import minimal, with_field

from cjob_spec import CheckpointedJob, SpecError, parse_job, spec_hash

SECRET_VOLUME = {"name": "kafka-tls", "secret": {"secretName": "kafka-tls"}}
SIDECAR = {"name": "proxy", "image": "proxy:1"}


def job_with(pod: dict[str, Any], *, storage: str = "s3://ckpt/jobs",
             s3: dict[str, Any] | None = None) -> CheckpointedJob:
    document = with_field(minimal(), "spec.checkpoint.storage", storage)
    if s3 is not None:
        document = with_field(document, "spec.checkpoint.s3", s3)
    return parse_job(with_field(document, "spec.pod", pod))


def refusal(pod: dict[str, Any], **kwargs: Any) -> SpecError:
    with pytest.raises(SpecError) as caught:
        job_with(pod, **kwargs)
    return caught.value


# --- what is read ----------------------------------------------------------------------


def test_variables_pull_secrets_and_templates_are_read_as_given() -> None:
    pod = {
        "env": [{"name": "KAFKA_USER", "valueFrom": {"secretKeyRef": {"name": "kafka",
                                                                        "key": "user"}}},
                {"name": "LOG_LEVEL", "value": "debug"}],
        "envFrom": [{"secretRef": {"name": "kafka"}, "prefix": "KAFKA_"}],
        "imagePullSecrets": [{"name": "registry"}],
        "driverTemplate": {"metadata": {"labels": {"team": "ads"}},
                           "spec": {"containers": [SIDECAR]}},
        "executorTemplate": {"spec": {"tolerations": [{"key": "spot", "operator": "Exists"}],
                                      "volumes": [SECRET_VOLUME]}},
    }
    settings = job_with(pod).spec.pod
    assert settings.document() == pod
    assert settings.image_pull_secrets == ("registry",)


def test_a_template_changes_the_spec_hash_so_running_pods_are_replaced() -> None:
    plain = job_with({})
    templated = job_with({"executorTemplate": {"spec": {"volumes": [SECRET_VOLUME]}}})
    assert spec_hash(templated) != spec_hash(plain)
    assert spec_hash(job_with({"envFrom": [{"secretRef": {"name": "k"}}]})) != spec_hash(plain)


def test_a_template_that_names_only_its_kind_is_accepted() -> None:
    pod = {"driverTemplate": {"apiVersion": "v1", "kind": "Pod",
                              "spec": {"hostAliases": [{"ip": "10.0.0.1",
                                                        "hostnames": ["broker"]}]}}}
    template = job_with(pod).spec.pod.driver_template
    assert template == {"spec": {"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["broker"]}]}}


def test_the_job_container_of_a_template_may_add_variables_and_mounts_of_its_volumes() -> None:
    pod = {"executorTemplate": {"spec": {
        "volumes": [SECRET_VOLUME],
        "containers": [{"name": "spark-kubernetes-executor",
                        "env": [{"name": "TLS_DIR", "value": "/tls"}],
                        "volumeMounts": [{"name": "kafka-tls", "mountPath": "/tls"}]}]}}}
    assert job_with(pod).spec.pod.executor_template is not None


# --- what is refused --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "field", "problem"),
    [
        # The operator's variables, and Spark's.
        ({"env": [{"name": "POD_IP", "value": "1.2.3.4"}]}, "spec.pod.env[0].name",
         "POD_IP is set by the operator"),
        ({"env": [{"name": "SPARK_EXECUTOR_ID", "value": "1"}]}, "spec.pod.env[0].name",
         "set by Spark"),
        ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]},
         "spec.pod.env[1].name", "set twice"),
        ({"env": [{"name": "A"}]}, "spec.pod.env[0]", "exactly one of value and valueFrom"),
        ({"env": [{"value": "x"}]}, "spec.pod.env[0].name", "required"),
        ({"envFrom": [{"prefix": "X_"}]}, "spec.pod.envFrom[0]",
         "exactly one of secretRef and configMapRef"),
        ({"envFrom": [{"secretRef": {}}]}, "spec.pod.envFrom[0].secretRef.name", "required"),
        ({"imagePullSecrets": ["registry"]}, "spec.pod.imagePullSecrets[0]", "mapping"),
        ({"volumes": [{"name": "x", "emptyDir": {}}],
          "volumeMounts": [{"name": "x", "mountPath": "/etc/checkpointed-jobs/spark-auth"}]},
         "spec.pod.volumeMounts[0].mountPath", "where the operator mounts its own files"),
        # A template: what the operator sets, with where its value comes from.
        ({"driverTemplate": {"metadata": {"name": "mine"}}},
         "spec.pod.driverTemplate.metadata.name", "set by the operator"),
        ({"driverTemplate": {"metadata": {"labels": {"checkpointed.io/job": "x"}}}},
         "spec.pod.driverTemplate.metadata.labels.checkpointed.io/job", "set by the operator"),
        ({"executorTemplate": {"metadata": {"labels": {"spark-role": "driver"}}}},
         "spec.pod.executorTemplate.metadata.labels.spark-role", "Spark"),
        ({"driverTemplate": {"metadata": {"annotations": {"prometheus.io/port": "1"}}}},
         "spec.pod.driverTemplate.metadata.annotations.prometheus.io/port",
         "set by the operator"),
        ({"driverTemplate": {"spec": {"restartPolicy": "Always"}}},
         "spec.pod.driverTemplate.spec.restartPolicy", "set by the operator"),
        ({"driverTemplate": {"spec": {"serviceAccountName": "admin"}}},
         "spec.pod.driverTemplate.spec.serviceAccountName", "service account"),
        ({"executorTemplate": {"spec": {"securityContext": {"runAsUser": 0}}}},
         "spec.pod.executorTemplate.spec.securityContext", "spec.pod.securityContext"),
        ({"driverTemplate": {"spec": {"containers": [{"name": "driver", "image": "x:1"}]}}},
         "spec.pod.driverTemplate.spec.containers[0].image", "set from spec.image"),
        ({"executorTemplate": {"spec": {"containers": [
            {"name": "spark-kubernetes-executor", "resources": {"limits": {"cpu": "8"}}}]}}},
         "spec.pod.executorTemplate.spec.containers[0].resources", "spec.spark.executor"),
        ({"driverTemplate": {"spec": {"containers": [
            {"name": "driver", "securityContext": {"privileged": True}}]}}},
         "spec.pod.driverTemplate.spec.containers[0].securityContext",
         "spec.pod.containerSecurityContext"),
        ({"driverTemplate": {"spec": {"containers": [
            {"name": "driver", "env": [{"name": "POD_NAME", "value": "x"}]}]}}},
         "spec.pod.driverTemplate.spec.containers[0].env[0].name", "set by the operator"),
        ({"env": [{"name": "A", "value": "1"}],
          "driverTemplate": {"spec": {"containers": [
              {"name": "driver", "env": [{"name": "A", "value": "2"}]}]}}},
         "spec.pod.driverTemplate.spec.containers[0].env[0].name", "spec.pod.env too"),
        ({"driverTemplate": {"spec": {"containers": [
            {"name": "driver", "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}]}}},
         "spec.pod.driverTemplate.spec.containers[0].volumeMounts[0].name",
         "no volume named 'nope'"),
        ({"driverTemplate": {"spec": {"volumes": [{"name": "spark-auth", "emptyDir": {}}]}}},
         "spec.pod.driverTemplate.spec.volumes[0].name", "operator's or Spark's"),
        ({"volumes": [SECRET_VOLUME],
          "executorTemplate": {"spec": {"volumes": [SECRET_VOLUME]}}},
         "spec.pod.executorTemplate.spec.volumes[0].name", "spec.pod.volumes too"),
        ({"priorityClassName": "batch",
          "executorTemplate": {"spec": {"priorityClassName": "spot"}}},
         "spec.pod.executorTemplate.spec.priorityClassName", "spec.pod.priorityClassName"),
        ({"nodeSelector": {"pool": "a"},
          "executorTemplate": {"spec": {"nodeSelector": {"pool": "b"}}}},
         "spec.pod.executorTemplate.spec.nodeSelector.pool", "spec.pod.nodeSelector"),
        ({"driverTemplate": {"spec": {"containers": [SIDECAR, SIDECAR]}}},
         "spec.pod.driverTemplate.spec.containers[1].name", "declared twice"),
        ({"driverTemplate": {"kind": "Deployment"}}, "spec.pod.driverTemplate.kind",
         "must be Pod"),
        ({"driverTemplate": {"status": {}}}, "spec.pod.driverTemplate.status",
         "not a field of a pod template"),
        ({"driverTemplate": ["pod"]}, "spec.pod.driverTemplate", "mapping"),
    ],
)
def test_a_field_the_operator_sets_or_a_broken_one_is_refused_naming_it(
        pod: dict[str, Any], field: str, problem: str) -> None:
    error = refusal(pod)
    assert error.field == field, str(error)
    assert problem in str(error)
    assert "\n" not in str(error)


def test_a_variable_that_the_checkpoint_s3_section_sets_is_refused() -> None:
    error = refusal({"env": [{"name": "AWS_REGION", "value": "eu-west-1"}]},
                    s3={"region": "us-east-1"})
    assert error.field == "spec.pod.env[0].name"
    assert "spec.checkpoint.s3" in str(error)


def test_a_variable_the_checkpoint_s3_section_leaves_unset_is_the_users() -> None:
    job = job_with({"env": [{"name": "AWS_REGION", "value": "eu-west-1"}]},
                   s3={"endpoint": "http://s3.local:9000"})
    assert job.spec.pod.env[0]["value"] == "eu-west-1"
