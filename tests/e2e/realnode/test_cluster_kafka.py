"""Kafka in the cluster: the broker of ``e2e/realnode/kafka.py`` as a pod behind the
Service ``kafka.kafka``, reached by pods at its cluster name and by the host at the
Service's address; the click-count example run on it through the operator, its
driver killed mid-run, every count read back from the host exactly once."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from e2e.controlplane.rest import quote
from e2e.jobs import KAFKA_CLICKS_DIR, kafka_clicks_module
from e2e.kafka.clients import create_topic, read_topic, transactional_producer
from e2e.kind.chart import ChartRelease
from e2e.realnode import scenario
from e2e.realnode.cluster_s3 import ClusterS3
from e2e.realnode.kafka import ClusterKafka
from e2e.realnode.kafka_clicks import set_up_clicks
from e2e.realnode.pytest_plugin import RealCluster

pytestmark = [
    # The session fixture may import images and start the node inside the first test.
    pytest.mark.timeout(1800),
]

CLICKS = 3_000
USERS = 40
DELAY = 0.02  # seconds per click: about 30 s of work for two subtasks, so a kill lands mid-run


POD_CLIENT = """\
import json, sys
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

bootstrap, to_host, from_host, count = sys.argv[1:5]
producer = Producer({"bootstrap.servers": bootstrap})
for i in range(int(count)):
    producer.produce(to_host, key=b"pod", value=f"pod-{i}".encode())
if producer.flush(60):
    sys.exit("not every record was acknowledged")
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pod-reader",
                     "enable.partition.eof": True, "isolation.level": "read_committed"})
consumer.assign([TopicPartition(from_host, 0, OFFSET_BEGINNING)])
values = []
while True:
    message = consumer.poll(60)
    if message is None:
        sys.exit("no end of " + from_host)
    if message.error() is not None:
        if message.error().code() == KafkaError._PARTITION_EOF:
            break
        sys.exit(str(message.error()))
    values.append(message.value().decode())
consumer.close()
print("read " + json.dumps(values))
"""


def test_a_pod_and_the_host_produce_and_consume_through_the_broker_in_the_cluster(
    real_cluster: RealCluster, real_namespace: str, cluster_kafka: ClusterKafka
) -> None:
    assert cluster_kafka.cluster_bootstrap == "kafka.kafka.svc.cluster.local:9092"
    bootstrap = cluster_kafka.host_bootstrap
    to_host = create_topic(bootstrap=bootstrap, partitions=1)
    from_host = create_topic(bootstrap=bootstrap, partitions=1)
    # The host writes in a transaction: its commit markers go through the broker's
    # listener to itself, and the pod reads read_committed.
    producer = transactional_producer(bootstrap=bootstrap, transactional_id=f"host-{from_host}")
    producer.begin_transaction()
    for i in range(20):
        producer.produce(from_host, key=b"host", value=f"host-{i}".encode())
    producer.commit_transaction(30)

    rest = real_cluster.rest()
    pods = f"/api/v1/namespaces/{quote(real_namespace)}/pods"
    rest.request("POST", pods, body={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kafka-client"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "client", "image": real_cluster.runtime_image, "imagePullPolicy": "Never",
            "command": ["python", "-c", POD_CLIENT, cluster_kafka.cluster_bootstrap,
                        to_host, from_host, "30"],
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
        }]},
    })  # fmt: skip

    def finished() -> str | None:
        phase = rest.get(f"{pods}/kafka-client")["status"].get("phase")
        return str(phase) if phase in ("Succeeded", "Failed") else None

    phase = scenario.wait_until(finished, what="the client pod to finish", timeout=180)
    logs = rest.get_text(f"{pods}/kafka-client/log")
    assert phase == "Succeeded", logs
    read_line = next(line for line in logs.splitlines() if line.startswith("read "))
    assert json.loads(read_line.removeprefix("read ")) == [f"host-{i}" for i in range(20)]
    records = read_topic(bootstrap=bootstrap, topic=to_host)
    assert [r.value for r in records] == [f"pod-{i}".encode() for i in range(30)]


def test_the_kafka_clicks_example_survives_a_driver_kill_with_every_count_once(
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
                           namespace=real_namespace, name="kafka-clicks", count=CLICKS,
                           users=USERS)
    clicks_topic, counts_topic, bucket = topics.clicks, topics.counts, topics.bucket
    manifest = _example_manifest(bucket=bucket, clicks=clicks_topic, counts=counts_topic,
                                 s3_endpoint=cluster_s3.cluster_endpoint)  # fmt: skip
    created_at = time.monotonic()
    kubectl("apply", "--namespace", real_namespace, "-f", "-", stdin=yaml.safe_dump(manifest))
    rest = real_cluster.rest()
    job = scenario.JobHandle(rest=rest, namespace=real_namespace, name="kafka-clicks")

    scenario.wait_until(lambda: job.latest_checkpoint_id() >= 2, what="checkpoint 2",
                        timeout=400, detail=job.describe)  # fmt: skip
    record_property("create_to_checkpoint_2_s", round(time.monotonic() - created_at, 1))
    status = job.status()
    assert status.get("phase") == "Running", f"the job ended before the kill: {job.describe()}"
    first = status["driverPod"]
    checkpoint_before_kill = job.latest_checkpoint_id()
    real_cluster.kill_container(job.driver() or {})

    def next_driver() -> str | None:
        name = job.status().get("driverPod")
        return str(name) if name and name != first else None

    second = scenario.wait_until(next_driver, what="a second attempt", timeout=120,
                                 detail=job.describe)  # fmt: skip

    def final() -> dict[str, Any] | None:
        current = job.status()
        return current if current.get("phase") in ("Succeeded", "Failed") else None

    done = scenario.wait_until(final, what="the job to finish", timeout=600, detail=job.describe)
    record_property("create_to_finish_s", round(time.monotonic() - created_at, 1))
    assert done["phase"] == "Succeeded", job.describe()
    assert done["restarts"] == 1
    restored = scenario.restored_id_from_logs(job.logs(second))
    assert restored is not None and restored >= checkpoint_before_kill
    assert done["restoredFrom"]["id"] == restored

    # As verify.py does it: both topics read_committed from the host.
    clicks = verify.read_values(bootstrap, clicks_topic)
    counts = verify.read_values(bootstrap, counts_topic)
    assert len(clicks) == CLICKS
    assert verify.verify(clicks, counts) == []
    assert len(counts) == CLICKS, "one count per click, none repeated"


def _example_manifest(*, bucket: str, clicks: str, counts: str, s3_endpoint: str) -> dict[str, Any]:
    """The example as written, with this test's topics, bucket and a delay per click."""
    manifest: dict[str, Any] = yaml.safe_load(
        (KAFKA_CLICKS_DIR / "kafka-clicks-cluster.yaml").read_text()
    )
    spec = manifest["spec"]
    assert spec["job"]["args"]["bootstrap"] == "kafka.kafka.svc.cluster.local:9092"
    assert spec["job"]["args"]["bounded"] is True
    spec["job"]["args"].update({"input": clicks, "output": counts, "delay": DELAY})
    spec["checkpoint"]["storage"] = f"s3://{bucket}/checkpoints"
    assert spec["checkpoint"]["s3"]["endpoint"] == s3_endpoint
    spec["restartPolicy"]["backoff"] = {"initial": "1s", "max": "5s"}
    return manifest
