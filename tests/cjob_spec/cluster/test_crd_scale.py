"""The scale subresource and the maxParallelism rule, on a real API server.

``kubectl scale cjob NAME --replicas N`` (and an autoscaler) goes through
``/scale``: the API server maps it onto ``spec.parallelism``, validates the result
with the CRD's rules (so never above ``maxParallelism``), and reads the current
replicas and the pods' selector from what the operator writes into the status.
``maxParallelism`` may change until the job has a checkpoint, never after.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from spec_documents import minimal

from e2e.controlplane.rest import ApiError, RestClient, quote
from e2e.operator_process import JOBS_PATH, install_crd

MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def crd(kube_rest: RestClient) -> None:
    install_crd(kube_rest)


def job_path(namespace: str, name: str) -> str:
    return JOBS_PATH.format(namespace=quote(namespace)) + f"/{quote(name)}"


def create_job(rest: RestClient, namespace: str, name: str) -> dict[str, Any]:
    body = copy.deepcopy(minimal())
    body["metadata"] = {"name": name, "namespace": namespace}
    body["spec"]["parallelism"] = 2
    body["spec"]["spark"] = {"master": "local[4]"}
    created: dict[str, Any] = rest.request("POST", JOBS_PATH.format(namespace=quote(namespace)),
                                           body=body)
    return created


def refusal(call: Any) -> str:
    with pytest.raises(ApiError) as raised:
        call()
    assert raised.value.status == 422, raised.value.message
    return raised.value.message


def test_kubectl_scale_sets_the_parallelism_and_reads_the_replicas_the_operator_reports(
        kube_rest: RestClient, kube_namespace: str, crd: None) -> None:
    create_job(kube_rest, kube_namespace, "scaled")
    path = job_path(kube_namespace, "scaled")
    kube_rest.request("PATCH", path + "/status", content_type=MERGE, body={"status": {
        "parallelism": 2, "selector": "checkpointed.io/job=scaled"}})
    scale = kube_rest.get(path + "/scale")
    assert scale["spec"]["replicas"] == 2
    assert scale["status"] == {"replicas": 2, "selector": "checkpointed.io/job=scaled"}

    scale["spec"]["replicas"] = 3
    kube_rest.request("PUT", path + "/scale", body=scale)
    assert kube_rest.get(path)["spec"]["parallelism"] == 3

    scale = kube_rest.get(path + "/scale")
    scale["spec"]["replicas"] = 200
    message = refusal(lambda: kube_rest.request("PUT", path + "/scale", body=scale))
    assert "parallelism must be <= maxParallelism" in message
    assert kube_rest.get(path)["spec"]["parallelism"] == 3


def test_max_parallelism_may_change_until_the_job_has_a_checkpoint(
        kube_rest: RestClient, kube_namespace: str, crd: None) -> None:
    create_job(kube_rest, kube_namespace, "keyed")
    path = job_path(kube_namespace, "keyed")
    kube_rest.request("PATCH", path, content_type=MERGE,
                      body={"spec": {"maxParallelism": 256}})
    assert kube_rest.get(path)["spec"]["maxParallelism"] == 256

    kube_rest.request("PATCH", path + "/status", content_type=MERGE, body={"status": {
        "latestCheckpoint": {"id": 1, "path": "s3://ckpt/keyed-u/chk-1/_metadata"}}})
    message = refusal(lambda: kube_rest.request(
        "PATCH", path, content_type=MERGE, body={"spec": {"maxParallelism": 512}}))
    assert "spec.maxParallelism cannot change once the job has a checkpoint" in message
    assert kube_rest.get(path)["spec"]["maxParallelism"] == 256
    # Everything else can still change.
    kube_rest.request("PATCH", path, content_type=MERGE, body={"spec": {"parallelism": 4}})
    assert kube_rest.get(path)["spec"]["parallelism"] == 4
