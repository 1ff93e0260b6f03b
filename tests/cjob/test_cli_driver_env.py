"""The driver's environment is built by one function for both supervisors.

The operator's driver pod and ``cjob run``'s local driver must see the same S3
settings: a job whose spec names an S3-compatible endpoint used to checkpoint against
the default AWS endpoint when run locally.
"""

from __future__ import annotations

from typing import Any

from cjob_operator.builders import build_driver_pod
from cjob_operator.config import OperatorConfig

from cjob.embedded import driver_environment
from cjob_spec import parse_job
from cjob_spec.driver_env import EnvVar, SecretKeyRef, driver_env

DOCUMENT: dict[str, Any] = {
    "apiVersion": "checkpointed.io/v1alpha1",
    "kind": "CheckpointedJob",
    "metadata": {"name": "clicks", "namespace": "team", "uid": "uid-1"},
    "spec": {
        "image": "example.org/clicks:1.0",
        "job": {"entrypoint": "clicks.job:build"},
        "checkpoint": {
            "storage": "s3://ckpt/jobs",
            "s3": {"endpoint": "http://minio:9000", "region": "eu-west-1",
                   "credentialsSecret": "s3-creds"},
        },
    },
}


def test_the_spec_names_the_driver_variables_once_with_secrets_as_references() -> None:
    assert driver_env(parse_job(DOCUMENT)) == (
        EnvVar(name="PYTHONUNBUFFERED", value="1"),
        EnvVar(name="AWS_ACCESS_KEY_ID",
               secret=SecretKeyRef(secret="s3-creds", key="AWS_ACCESS_KEY_ID")),
        EnvVar(name="AWS_SECRET_ACCESS_KEY",
               secret=SecretKeyRef(secret="s3-creds", key="AWS_SECRET_ACCESS_KEY")),
        EnvVar(name="AWS_ENDPOINT_URL", value="http://minio:9000"),
        EnvVar(name="AWS_REGION", value="eu-west-1"),
        EnvVar(name="AWS_DEFAULT_REGION", value="eu-west-1"),
    )


def test_the_operator_and_cjob_run_give_the_driver_the_same_variables() -> None:
    job = parse_job(DOCUMENT)
    pod = build_driver_pod(job, attempt=1, restore_pointer="latest", image="img",
                           operator_config=OperatorConfig())
    pod_env = pod["spec"]["containers"][0]["env"]
    on_cluster_values = {e["name"]: e["value"] for e in pod_env if "value" in e}
    on_cluster_secrets = {e["name"] for e in pod_env
                          if "secretKeyRef" in e.get("valueFrom", {})}
    local = driver_environment(job, {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"})
    assert on_cluster_secrets == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert {k: v for k, v in local.items() if k not in on_cluster_secrets} == on_cluster_values
    # Locally the credentials come from this process's environment: no Secrets here.
    assert local["AWS_ACCESS_KEY_ID"] == "k"


def test_cjob_run_lets_variables_already_set_win_over_the_spec() -> None:
    local = driver_environment(parse_job(DOCUMENT), {"AWS_ENDPOINT_URL": "http://other:1"})
    assert local["AWS_ENDPOINT_URL"] == "http://other:1"
    assert local["AWS_REGION"] == "eu-west-1"
