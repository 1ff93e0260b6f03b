"""Fixtures the real-node scenarios share: kubectl, the chart's operator installed
from its image, the S3 server and the Kafka broker in the cluster (one of each per
test session)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.kind.chart import ChartRelease
from e2e.realnode import scenario
from e2e.realnode.cluster_s3 import ClusterS3, start_s3
from e2e.realnode.kafka import ClusterKafka, start_kafka
from e2e.realnode.pytest_plugin import RealCluster


@pytest.fixture(scope="session")
def kubectl(real_cluster: RealCluster) -> scenario.Kubectl:
    return scenario.Kubectl(
        binary=real_cluster.bin_dir / "kubectl", kubeconfig=real_cluster.kubeconfig
    )


@pytest.fixture(scope="session")
def operator(
    real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChartRelease]:
    release = scenario.install_restricted_operator(
        rest=real_cluster.rest(),
        helm=real_cluster.bin_dir / "helm",
        home=tmp_path_factory.mktemp("helm"),
        kubeconfig=real_cluster.kubeconfig,
        operator_image=real_cluster.operator_image,
        runtime_image=real_cluster.runtime_image,
    )
    yield release
    release.uninstall(missing_ok=True)


@pytest.fixture(scope="session")
def cluster_s3(real_cluster: RealCluster) -> ClusterS3:
    return start_s3(node=real_cluster.node, namespace="s3")


@pytest.fixture(scope="session")
def cluster_kafka(real_cluster: RealCluster) -> ClusterKafka:
    from e2e.kafka.jars import ensure_jars

    return start_kafka(node=real_cluster.node, image=real_cluster.runtime_image,
                       jar_dir=ensure_jars(), namespace="kafka")  # fmt: skip
