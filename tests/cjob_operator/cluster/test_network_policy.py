"""The job's NetworkPolicy, as the API server stores it, selects exactly the job's pods.

The local control plane's network plugin does not enforce NetworkPolicies (few
simple ones do), so what is tested is the object: its selectors match the labels
the driver pod and Spark's executor pods carry, it admits the job's own pods, and it
opens the metrics port to everyone.
"""

from __future__ import annotations

from typing import Any

from cjob_operator.api import KubeCluster
from cjob_operator.builders import build_driver_pod, build_network_policy
from cjob_operator.config import OperatorConfig
from kubernetes import client as k8s_client
from pod_settings import runtime_settings_of

from cjob_spec import CheckpointedJob, parse_job
from cjob_spec.names import network_policy_name

CONFIG = OperatorConfig()


def job_in(namespace: str, name: str = "clicks") -> CheckpointedJob:
    return parse_job({
        "apiVersion": "checkpointed.io/v1alpha1",
        "kind": "CheckpointedJob",
        "metadata": {"name": name, "namespace": namespace, "uid": "uid-1"},
        "spec": {"image": "example.org/clicks:1.0", "job": {"entrypoint": "clicks.job:build"},
                 "checkpoint": {"storage": "s3://ckpt/jobs"}},
    })


def without_owner(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["metadata"].pop("ownerReferences", None)
    return manifest


def matches(selector: Any, labels: dict[str, str]) -> bool:
    assert not selector.match_expressions
    return all(labels.get(key) == value for key, value in (selector.match_labels or {}).items())


def executor_labels(driver: dict[str, Any]) -> dict[str, str]:
    prefix = "spark.kubernetes.executor.label."
    conf = runtime_settings_of(driver).spark_conf
    return {key[len(prefix):]: value for key, value in conf.items() if key.startswith(prefix)}


def test_the_network_policy_admits_the_jobs_own_pods_and_metrics_from_anywhere(
    kube_api_client: Any, kube_namespace: str
) -> None:
    job = job_in(kube_namespace)
    cluster = KubeCluster(api_client=kube_api_client, instance="test")
    manifest = without_owner(build_network_policy(job, operator_config=CONFIG))
    cluster.ensure_object(manifest=manifest)
    cluster.ensure_object(manifest=manifest)   # an existing policy is brought up to date

    stored = k8s_client.NetworkingV1Api(kube_api_client).read_namespaced_network_policy(
        network_policy_name("clicks"), kube_namespace)
    driver = build_driver_pod(job, attempt=1, restore_pointer="latest",
                              image="example.org/clicks:1.0", operator_config=CONFIG)
    driver_labels = driver["metadata"]["labels"]
    other_job = build_driver_pod(job_in(kube_namespace, "views"), attempt=1,
                                 restore_pointer="latest", image="example.org/views:1.0",
                                 operator_config=CONFIG)["metadata"]["labels"]

    spec = stored.spec
    assert spec.policy_types == ["Ingress"]
    assert matches(spec.pod_selector, driver_labels)
    assert matches(spec.pod_selector, executor_labels(driver))
    assert not matches(spec.pod_selector, other_job)

    peers, metrics = spec.ingress
    (peer,) = peers._from
    assert peer.namespace_selector is None and peer.ip_block is None
    assert matches(peer.pod_selector, driver_labels)
    assert matches(peer.pod_selector, executor_labels(driver))
    assert not matches(peer.pod_selector, other_job)
    assert peers.ports is None   # every port, between the job's own pods
    assert metrics._from is None   # from anywhere (Prometheus)
    metrics_port = next(port["containerPort"] for port in driver["spec"]["containers"][0]["ports"]
                        if port["name"] == "metrics")
    assert [(port.protocol, port.port) for port in metrics.ports] == [("TCP", metrics_port)]
