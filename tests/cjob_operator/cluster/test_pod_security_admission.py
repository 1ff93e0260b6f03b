"""The job's pods pass the API server's Pod Security admission at the "restricted" level.

Each test runs in a namespace labelled ``pod-security.kubernetes.io/enforce=restricted``
on the local control plane, whose kube-apiserver runs the PodSecurity admission
plugin (on by default, never disabled by the fixture). The pods are created for real
and stay Pending: admission, not the node, is what is tested.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from cjob_operator.builders import (
    build_cleanup_pod,
    build_driver_pod,
    build_service_account,
)
from cjob_operator.config import OperatorConfig

from cjob_spec import CheckpointedJob, parse_job
from cjob_spec.names import ANNOTATION_EXECUTOR_POD_TEMPLATE, EXECUTOR_CONTAINER
from e2e.controlplane import RestClient
from e2e.controlplane.rest import ApiError, quote

IMAGE = "checkpointed-jobs/runtime:0.1.0"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


def job_in(namespace: str, *, master: str = "k8s", pod: dict[str, Any] | None = None
           ) -> CheckpointedJob:
    spec: dict[str, Any] = {
        "image": IMAGE,
        "job": {"entrypoint": "clicks.job:build"},
        "spark": {"master": master},
        "checkpoint": {"storage": "s3://ckpt/jobs"},
    }
    if pod is not None:
        spec["pod"] = pod
    return parse_job({
        "apiVersion": "checkpointed.io/v1alpha1",
        "kind": "CheckpointedJob",
        "metadata": {"name": "clicks", "namespace": namespace, "uid": "uid-1"},
        "spec": spec,
    })


def enforce_restricted(rest: RestClient, namespace: str) -> None:
    labels = {"pod-security.kubernetes.io/enforce": "restricted",
              "pod-security.kubernetes.io/enforce-version": "latest"}
    rest.request("PATCH", f"/api/v1/namespaces/{quote(namespace)}",
                 body={"metadata": {"labels": labels}}, content_type=STRATEGIC_MERGE)


def without_owner(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest without its owner reference: no CheckpointedJob exists here."""
    result = copy.deepcopy(manifest)
    result["metadata"].pop("ownerReferences", None)
    return result


def create_pod(rest: RestClient, namespace: str, pod: dict[str, Any]) -> None:
    rest.request("POST", f"/api/v1/namespaces/{quote(namespace)}/pods", body=pod)


def driver_pod(job: CheckpointedJob, rest: RestClient) -> dict[str, Any]:
    """The driver pod of attempt 1, with its ServiceAccount created (admission wants it)."""
    account = without_owner(build_service_account(job))
    rest.request("POST", f"/api/v1/namespaces/{quote(job.namespace)}/serviceaccounts",
                 body=account)
    return without_owner(build_driver_pod(job, attempt=1, restore_pointer="latest", image=IMAGE,
                                          operator_config=OperatorConfig()))


def executor_pod_from_template(driver: dict[str, Any]) -> dict[str, Any]:
    """An executor pod as Spark builds it from the template the driver pod carries:
    the template, plus a name, Spark's container fields and labels."""
    template = yaml.safe_load(driver["metadata"]["annotations"][ANNOTATION_EXECUTOR_POD_TEMPLATE])
    pod = copy.deepcopy(template)
    pod["metadata"]["name"] = "clicks-1-exec-1"
    pod["metadata"]["labels"]["spark-role"] = "executor"
    pod["spec"]["restartPolicy"] = "Never"
    container = pod["spec"]["containers"][0]
    assert container["name"] == EXECUTOR_CONTAINER
    container.update({"image": IMAGE, "args": ["executor"],
                      "resources": {"requests": {"cpu": "1", "memory": "1408Mi"}}})
    return dict(pod)


@pytest.mark.parametrize("master", ["k8s", "local[2]"])
def test_the_driver_pod_is_admitted_where_pod_security_is_restricted(
    kube_rest: RestClient, kube_namespace: str, master: str
) -> None:
    enforce_restricted(kube_rest, kube_namespace)
    pod = driver_pod(job_in(kube_namespace, master=master), kube_rest)
    create_pod(kube_rest, kube_namespace, pod)


def test_a_driver_pod_without_security_contexts_is_refused_there(
    kube_rest: RestClient, kube_namespace: str
) -> None:
    enforce_restricted(kube_rest, kube_namespace)
    pod = driver_pod(job_in(kube_namespace), kube_rest)
    del pod["spec"]["securityContext"]
    del pod["spec"]["containers"][0]["securityContext"]
    with pytest.raises(ApiError) as refused:
        create_pod(kube_rest, kube_namespace, pod)
    assert refused.value.status == 403
    assert "violates PodSecurity" in refused.value.message


def test_an_executor_pod_made_from_the_template_is_admitted_there(
    kube_rest: RestClient, kube_namespace: str
) -> None:
    enforce_restricted(kube_rest, kube_namespace)
    driver = driver_pod(job_in(kube_namespace), kube_rest)
    create_pod(kube_rest, kube_namespace, executor_pod_from_template(driver))


def test_adjusted_security_contexts_reach_both_pods_and_the_profile_judges_them(
    kube_rest: RestClient, kube_namespace: str
) -> None:
    enforce_restricted(kube_rest, kube_namespace)
    job = job_in(kube_namespace, pod={
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
        "containerSecurityContext": {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}},
    })
    driver = driver_pod(job, kube_rest)
    executor = executor_pod_from_template(driver)
    assert driver["spec"]["securityContext"]["runAsUser"] == 1000
    assert executor["spec"]["securityContext"]["runAsUser"] == 1000
    for pod in (driver, executor):
        with pytest.raises(ApiError) as refused:
            create_pod(kube_rest, kube_namespace, pod)
        assert "SYS_ADMIN" in refused.value.message


def test_the_cleanup_pod_is_admitted_there_and_carries_no_secret_value(
    kube_rest: RestClient, kube_namespace: str
) -> None:
    """No ServiceAccount of the job is needed: the pod runs without API access."""
    enforce_restricted(kube_rest, kube_namespace)
    job = parse_job({
        "apiVersion": "checkpointed.io/v1alpha1",
        "kind": "CheckpointedJob",
        "metadata": {"name": "clicks", "namespace": kube_namespace, "uid": "uid-1"},
        "spec": {
            "image": IMAGE,
            "job": {"entrypoint": "clicks.job:build"},
            "checkpoint": {"storage": "s3://ckpt/jobs",
                           "s3": {"endpoint": "http://s3:9000", "credentialsSecret": "creds"}},
        },
    })
    pod = without_owner(build_cleanup_pod(job, uris=("s3://ckpt/jobs/clicks-uid-1",),
                                          image=IMAGE, deadline_seconds=600,
                                          operator_config=OperatorConfig()))
    create_pod(kube_rest, kube_namespace, pod)
    created = kube_rest.get(f"/api/v1/namespaces/{quote(kube_namespace)}/pods/clicks-cleanup")
    env = created["spec"]["containers"][0]["env"]
    credentials = [item for item in env if item["name"].startswith("AWS_")
                   and item["name"] != "AWS_ENDPOINT_URL"]
    assert [item["name"] for item in credentials] == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
    assert all(set(item) == {"name", "valueFrom"} for item in credentials)
    assert not any(volume.get("secret") or volume.get("projected")
                   for volume in created["spec"].get("volumes", [])), "no token, no Secret volume"
