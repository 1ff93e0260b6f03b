"""The click-count example's set-up on the real node, as its scenarios share it: two
topics on the cluster's broker with the clicks produced into the first, a bucket with
its credentials Secret for the checkpoints, and the job's code as the ConfigMap
``kafka-clicks-code`` the example's manifest mounts."""

from __future__ import annotations

from dataclasses import dataclass

from e2e.jobs import KAFKA_CLICKS_DIR, kafka_clicks_module
from e2e.kafka.clients import create_topic
from e2e.realnode import scenario
from e2e.realnode.cluster_s3 import ClusterS3
from e2e.realnode.kafka import ClusterKafka


@dataclass(frozen=True)
class ClicksSetUp:
    clicks: str
    """The input topic, holding the clicks."""
    counts: str
    """The output topic, empty."""
    bucket: str


def set_up_clicks(*, kafka: ClusterKafka, s3: ClusterS3, kubectl: scenario.Kubectl,
                  namespace: str, name: str, count: int, users: int,
                  partitions: int = 4) -> ClicksSetUp:
    """Topics ``<name>-clicks-<ns>`` and ``<name>-counts-<ns>``, ``count`` clicks of
    ``users`` users in the first, bucket ``<name>-<ns>``, the code's ConfigMap in
    ``namespace``."""
    produce = kafka_clicks_module("produce")
    bootstrap = kafka.host_bootstrap
    suffix = namespace[-6:]
    clicks = create_topic(bootstrap=bootstrap, partitions=partitions,
                          name=f"{name}-clicks-{suffix}")
    counts = create_topic(bootstrap=bootstrap, partitions=partitions,
                          name=f"{name}-counts-{suffix}")
    produce.produce(bootstrap, clicks, produce.clicks(count=count, users=users))
    bucket = f"{name}-{suffix}"
    scenario.bucket_with_credentials(kubectl=kubectl, s3=s3, namespace=namespace, bucket=bucket)
    kubectl("create", "configmap", "kafka-clicks-code", "--namespace", namespace,
            f"--from-file=job.py={KAFKA_CLICKS_DIR / 'job.py'}")
    return ClicksSetUp(clicks=clicks, counts=counts, bucket=bucket)
