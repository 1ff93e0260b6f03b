"""The real node's scenarios on a kind cluster: the same scenario code
(``e2e/cluster_scenarios.py``), with kind's node container as the place pods run and
``ctr`` inside it as the way to kill one."""

from __future__ import annotations

from typing import Any

import pytest

from e2e import cluster_scenarios
from e2e.kind.chart import ChartRelease
from e2e.kind.cluster import KindCluster
from e2e.realnode import scenario
from e2e.realnode.cluster_s3 import ClusterS3

pytestmark = [
    # The session fixture builds the node image and creates the cluster in the first test.
    pytest.mark.timeout(1800),
]


def test_a_kind_cluster_has_a_ready_node_running_the_images_built_here(
    kind_cluster: KindCluster, kubectl: scenario.Kubectl
) -> None:
    nodes = kind_cluster.rest().get("/api/v1/nodes")["items"]
    assert [n["metadata"]["name"] for n in nodes] == [kind_cluster.node]
    conditions = {c["type"]: c["status"] for c in nodes[0]["status"]["conditions"]}
    assert conditions["Ready"] == "True"
    # The project's images are in the node's containerd (the node's status lists
    # images only at its next update).
    images = kind_cluster.ctr("images", "list", "--quiet").stdout.split()
    for tag in (kind_cluster.runtime_image, kind_cluster.operator_image):
        assert f"docker.io/{tag}" in images, f"{tag} not loaded into the node: {images}"
    # Cluster DNS answers in the node (kubeadm's CoreDNS from the image built here).
    assert "Running" in kubectl("get", "pods", "-n", "kube-system", "-l", "k8s-app=kube-dns",
                                "-o", "jsonpath={.items[*].status.phase}")  # fmt: skip


def test_a_k8s_job_survives_an_executor_kill_and_a_driver_kill_with_exactly_once_output(
    kind_cluster: KindCluster,
    kind_namespace: str,
    operator: ChartRelease,
    cluster_s3: ClusterS3,
    kubectl: scenario.Kubectl,
    record_property: Any,
) -> None:
    cluster_scenarios.executor_and_driver_kills(
        cluster=kind_cluster, namespace=kind_namespace, s3=cluster_s3, kubectl=kubectl,
        record_property=record_property,
    )  # fmt: skip
