"""``spec.autoscaler`` on the real node: the click-count example reading the cluster's
Kafka broker, one subtask at first, far behind a backlog. The operator (the chart's,
as a pod) reads the driver pod's metrics, applies a larger parallelism through a
Snapshot upgrade, the job drains the backlog, and once it keeps up the operator scales
it down again; every click is counted exactly once throughout (read back
``read_committed`` from the host)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from e2e.jobs import KAFKA_CLICKS_DIR, kafka_clicks_module
from e2e.kind.chart import ChartRelease
from e2e.realnode import scenario
from e2e.realnode.cluster_s3 import ClusterS3
from e2e.realnode.kafka import ClusterKafka
from e2e.realnode.kafka_clicks import set_up_clicks
from e2e.realnode.pytest_plugin import RealCluster

pytestmark = [pytest.mark.timeout(1800)]

CLICKS = 5_000
USERS = 30
DELAY = 0.02
"""Seconds per click in a subtask: one subtask reads 50 a second, far behind the backlog."""


def autoscaled_manifest(*, bucket: str, clicks: str, counts: str) -> dict[str, Any]:
    """The example as written, unbounded, at one subtask in the driver's own Spark
    (four slots: the node's two cores hold no four executors beside the broker), with
    the autoscaler applying what it recommends."""
    manifest: dict[str, Any] = yaml.safe_load(
        (KAFKA_CLICKS_DIR / "kafka-clicks-cluster.yaml").read_text())
    manifest["metadata"]["name"] = "autoscaled"
    spec = manifest["spec"]
    spec["job"]["args"].update({"input": clicks, "output": counts, "delay": DELAY})
    spec["job"]["args"].pop("bounded")
    spec["parallelism"] = 1
    spec["maxParallelism"] = 8
    spec["spark"] = {"master": "local[4]", "driver": {"cores": 1, "memory": "1Gi"}}
    spec["checkpoint"]["storage"] = f"s3://{bucket}/checkpoints"
    spec["checkpoint"]["interval"] = "2s"
    spec["upgradeMode"] = "Snapshot"
    spec["restartPolicy"]["backoff"] = {"initial": "1s", "max": "5s"}
    spec["autoscaler"] = {"mode": "Apply", "min": 1, "max": 4, "targetLag": "20s",
                          "targetUtilization": 1.0, "stabilization": "15s"}
    return manifest


def test_a_backlog_scales_the_job_up_on_the_node_a_drained_one_down_and_each_click_counts_once(
    real_cluster: RealCluster,
    real_namespace: str,
    operator: ChartRelease,
    cluster_s3: ClusterS3,
    cluster_kafka: ClusterKafka,
    kubectl: scenario.Kubectl,
    record_property: Any,
) -> None:
    verify = kafka_clicks_module("verify")
    bootstrap = cluster_kafka.host_bootstrap
    topics = set_up_clicks(kafka=cluster_kafka, s3=cluster_s3, kubectl=kubectl,
                           namespace=real_namespace, name="autoscaled", count=CLICKS,
                           users=USERS)
    clicks, counts = topics.clicks, topics.counts
    created_at = time.monotonic()
    kubectl("apply", "--namespace", real_namespace, "-f", "-",
            stdin=yaml.safe_dump(autoscaled_manifest(bucket=topics.bucket, clicks=clicks,
                                                     counts=counts)))
    job = scenario.JobHandle(rest=real_cluster.rest(), namespace=real_namespace,
                             name="autoscaled")

    def autoscaler() -> dict[str, Any]:
        found: dict[str, Any] = job.status().get("autoscaler") or {}
        return found

    def decided(accept: Callable[[int], bool]) -> dict[str, Any] | None:
        """The autoscaler's status once its applied parallelism is one ``accept``s, as
        first seen: a later pass keeps the parallelism but says Steady."""
        found = autoscaler()
        parallelism = found.get("parallelism")
        return found if parallelism is not None and accept(parallelism) else None

    def running_at(parallelism: int) -> bool | None:
        status = job.status()
        return (status.get("parallelism") == parallelism
                and status.get("phase") == "Running") or None

    # Behind at one subtask: the whole backlog of four partitions within 20 s at 10-60
    # clicks a second asks for more than two; four is the next divisor of the eight
    # key groups, and the maximum.
    up = scenario.wait_until(lambda: decided(lambda parallelism: parallelism > 1),
                             what="the autoscaler to scale up", timeout=400, detail=job.describe)
    print("scaled up:", up)
    record_property("create_to_scale_up_s", round(time.monotonic() - created_at, 1))
    assert up["parallelism"] == 4 and up["reason"] == "ScaleUp", up
    assert 10 <= up["capacityPerSubtask"] <= 60, up
    scenario.wait_until(lambda: running_at(4), what="an attempt running at 4", timeout=300,
                        detail=job.describe)
    spec = job.get()["spec"]  # type: ignore[index]
    assert spec["parallelism"] == 1, "the user's spec is left alone"

    # Drained, it keeps up: the capacity measured when behind says one is enough.
    down = scenario.wait_until(lambda: decided(lambda parallelism: parallelism == 1),
                               what="the autoscaler to scale back to 1", timeout=400,
                               detail=job.describe)
    print("scaled down:", down)
    assert down["reason"] == "ScaleDown", down
    scenario.wait_until(lambda: running_at(1), what="an attempt running at 1 again",
                        timeout=300, detail=job.describe)
    record_property("create_to_scaled_down_s", round(time.monotonic() - created_at, 1))
    reasons = [event.split(":", 1)[0] for event in job.events()]
    assert reasons.count("ScalingApplied") == 2, reasons
    assert "ScalingRecommended" in reasons

    # Every click counted once through both upgrades, once the attempt at 1 committed.
    values = scenario.wait_until(
        lambda: (found := verify.read_values(bootstrap, counts)) and len(found) >= CLICKS
        and found, what="every count committed", timeout=180)
    read = verify.read_values(bootstrap, clicks)
    assert len(read) == CLICKS
    assert len(values) == CLICKS, "one count per click, none repeated or lost"
    assert verify.verify(read, values) == []
