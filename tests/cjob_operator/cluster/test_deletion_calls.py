"""The calls a job's deletion makes, against a real API server and garbage collector:
listing the executors Spark created, and keeping a store whose data was kept."""

from __future__ import annotations

import time
from typing import Any

from cjob_operator.api import KubeCluster
from kubernetes import client as k8s_client
from kubernetes.client.rest import ApiException

from cjob_spec.names import ANNOTATION_RETAINED


def _configmap(name: str, *, owner: Any = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap",
                                        "name": owner.metadata.name, "uid": owner.metadata.uid}]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": "v"}}


def _pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "example.org/none:1"}],
                     "nodeName": "no-such-node"}}


def _exists(core: Any, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_config_map(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_a_retained_store_loses_its_owner_outlives_it_and_says_why(
    kube_api_client: Any, kube_namespace: str
) -> None:
    core = k8s_client.CoreV1Api(kube_api_client)
    owner = core.create_namespaced_config_map(kube_namespace, _configmap("job-stand-in"))
    core.create_namespaced_config_map(kube_namespace, _configmap("clicks-checkpoints", owner=owner))
    core.create_namespaced_config_map(kube_namespace, _configmap("control", owner=owner))
    cluster = KubeCluster(api_client=kube_api_client)

    cluster.retain_configmap(namespace=kube_namespace, name="clicks-checkpoints",
                             message="checkpoint data under s3://b/clicks-1 kept: access denied")
    cluster.retain_configmap(namespace=kube_namespace, name="never-was", message="x")

    kept = core.read_namespaced_config_map("clicks-checkpoints", kube_namespace)
    assert not kept.metadata.owner_references
    assert kept.metadata.annotations[ANNOTATION_RETAINED].endswith("kept: access denied")
    assert kept.data == {"k": "v"}
    core.delete_namespaced_config_map("job-stand-in", kube_namespace)
    deadline = time.monotonic() + 60
    while _exists(core, kube_namespace, "control") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _exists(core, kube_namespace, "control"), "the garbage collector ran"
    assert _exists(core, kube_namespace, "clicks-checkpoints")


def test_listing_pods_by_labels_finds_exactly_the_pods_with_all_of_them(
    kube_api_client: Any, kube_namespace: str
) -> None:
    core = k8s_client.CoreV1Api(kube_api_client)
    executor = {"checkpointed.io/job": "clicks", "checkpointed.io/role": "executor"}
    core.create_namespaced_pod(kube_namespace, _pod("clicks-exec-1", executor))
    core.create_namespaced_pod(kube_namespace, _pod("other-exec-1", {
        **executor, "checkpointed.io/job": "other"}))
    core.create_namespaced_pod(kube_namespace, _pod("clicks-attempt-1", {
        **executor, "checkpointed.io/role": "driver"}))
    cluster = KubeCluster(api_client=kube_api_client)
    found = cluster.list_pods(namespace=kube_namespace, labels=executor)
    assert [pod["metadata"]["name"] for pod in found] == ["clicks-exec-1"]
    assert found[0]["metadata"]["labels"] == executor, "camelCase manifests, as kopf gives"
