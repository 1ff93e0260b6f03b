"""Fixtures the kind scenarios share, as the real node's conftest gives its own: kubectl,
the chart's operator installed from its image, and the S3 server in the cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.kind.chart import ChartRelease
from e2e.kind.cluster import KindCluster
from e2e.realnode import scenario
from e2e.realnode.cluster_s3 import ClusterS3, start_s3


@pytest.fixture(scope="session")
def kubectl(kind_cluster: KindCluster) -> scenario.Kubectl:
    return scenario.Kubectl(
        binary=kind_cluster.bin_dir / "kubectl", kubeconfig=kind_cluster.kubeconfig
    )


@pytest.fixture(scope="session")
def operator(
    kind_cluster: KindCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChartRelease]:
    release = scenario.install_restricted_operator(
        rest=kind_cluster.rest(),
        helm=kind_cluster.bin_dir / "helm",
        home=tmp_path_factory.mktemp("helm"),
        kubeconfig=kind_cluster.kubeconfig,
        operator_image=kind_cluster.operator_image,
        runtime_image=kind_cluster.runtime_image,
    )
    yield release
    release.uninstall(missing_ok=True)


@pytest.fixture(scope="session")
def cluster_s3(kind_cluster: KindCluster) -> ClusterS3:
    return start_s3(node=kind_cluster, namespace="s3")
