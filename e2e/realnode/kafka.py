"""A Kafka broker in the cluster: one KRaft node (broker and controller in one process)
as a Deployment behind the Service ``kafka``, for jobs that read and write Kafka.

Pods reach it at ``kafka.<namespace>.svc.cluster.local:9092``; the host reaches it at
the Service's cluster IP on port 9094 (kube-proxy's rules cover the host too, as for
the S3 server). Each listener advertises the address its own clients can dial, so a
client that bootstrapped on one never gets sent to the other. A third listener on the
pod's loopback carries the broker's traffic to itself (the transaction coordinator
writing its markers), and the controller listens on loopback too: neither depends on
cluster DNS or on a Service leading a pod back to itself.

The image is the project's runtime image, not one of its own: it already has Java 17
and ``tini``, and it is imported into the node anyway. The broker's jars are the ones
:mod:`e2e.kafka.jars` fetches into the host's cache, mounted read-only by ``hostPath``
(the node is this machine). Packing them into a :class:`~e2e.realnode.small_images.SmallImage`
would also need a JVM and a libc in that image, i.e. a second Debian image to build
for the same released jars the host-side broker runs. The settings are those of the
host-side broker (``e2e/kafka/broker.py``): a single node's replication (factor 1,
one in-sync replica for the transaction state), no rebalance delay, few partitions for
the internal topics, transactions up to an hour.

The storage (``log.dirs``) is an ``emptyDir``, or a host folder that outlives the
cluster when ``data_path`` is given; the container formats it when it starts on an
unformatted one (``kafka-storage format --standalone``), as a broker's first start does.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.controlplane.rest import ApiError, RestClient, quote
from e2e.kafka.broker import new_cluster_id, single_node_properties
from e2e.realnode import dns
from e2e.realnode.node import NodeNotReadyError, RealNode

SERVICE = "kafka"
CLUSTER_PORT = 9092
HOST_PORT = 9094
#: The broker's listener to itself and its controller's, both on the pod's loopback.
BROKER_PORT = 9095
CONTROLLER_PORT = 9093
JARS_MOUNT = "/opt/kafka/libs"
DATA_MOUNT = "/var/lib/kafka"
CONFIG_MOUNT = "/etc/kafka"
#: The runtime image's user (uid 185): a host folder for the data is handed to it.
RUNTIME_UID = 185
HEAP_MB = 512

START_SCRIPT = f"""\
set -e
cp={JARS_MOUNT}/'*'
if [ ! -f {DATA_MOUNT}/meta.properties ]; then
  echo "formatting {DATA_MOUNT} for cluster $KAFKA_CLUSTER_ID"
  java -cp "$cp" kafka.tools.StorageTool format --standalone \\
    -t "$KAFKA_CLUSTER_ID" -c {CONFIG_MOUNT}/server.properties >/tmp/format.log 2>&1 \\
    || {{ cat /tmp/format.log; exit 1; }}
fi
exec java -Xmx{HEAP_MB}m -Djava.awt.headless=true \\
  -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \\
  -Dorg.slf4j.simpleLogger.log.kafka.server.KafkaRaftServer=info \\
  -Dorg.slf4j.simpleLogger.showDateTime=true \\
  -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS \\
  -cp "$cp" kafka.Kafka {CONFIG_MOUNT}/server.properties
"""


@dataclass(frozen=True)
class ClusterKafka:
    """Where the in-cluster broker answers: from pods and from the host."""

    namespace: str
    host_bootstrap: str

    @property
    def cluster_bootstrap(self) -> str:
        return f"{SERVICE}.{self.namespace}.svc.cluster.local:{CLUSTER_PORT}"

    def env_text(self) -> str:
        """The ``kafka.env`` lines: the host's bootstrap and the pods'."""
        return (
            f"KAFKA_BOOTSTRAP={self.host_bootstrap}\n"
            f"KAFKA_BOOTSTRAP_IN_CLUSTER={self.cluster_bootstrap}\n"
        )


def server_properties(*, namespace: str, host_address: str) -> str:
    """The broker's configuration; ``host_address`` is what the host dials (the
    Service's cluster IP)."""
    cluster_host = f"{SERVICE}.{namespace}.svc.cluster.local"
    listeners = (
        f"CLUSTER://0.0.0.0:{CLUSTER_PORT},HOST://0.0.0.0:{HOST_PORT},"
        f"BROKER://127.0.0.1:{BROKER_PORT},CONTROLLER://127.0.0.1:{CONTROLLER_PORT}"
    )
    advertised = (
        f"CLUSTER://{cluster_host}:{CLUSTER_PORT},HOST://{host_address}:{HOST_PORT},"
        f"BROKER://127.0.0.1:{BROKER_PORT},CONTROLLER://127.0.0.1:{CONTROLLER_PORT}"
    )
    return single_node_properties(
        controller=f"127.0.0.1:{CONTROLLER_PORT}", listeners=listeners, advertised=advertised,
        inter_broker_listener="BROKER",
        protocols="CLUSTER:PLAINTEXT,HOST:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
        log_dirs=DATA_MOUNT)


def service_manifest(*, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": namespace, "labels": _LABELS},
        "spec": {
            "selector": _LABELS,
            "ports": [
                {"name": "kafka", "port": CLUSTER_PORT},
                {"name": "kafka-host", "port": HOST_PORT},
            ],
        },
    }


def manifests(
    *, namespace: str, host_address: str, image: str, jar_dir: Path, data_path: Path | None
) -> list[dict[str, Any]]:
    """The broker's ConfigMap and Deployment (the Service comes first: its cluster IP
    is in the configuration)."""
    data: dict[str, Any] = (
        {"name": "data", "hostPath": {"path": str(data_path), "type": "DirectoryOrCreate"}}
        if data_path is not None
        else {"name": "data", "emptyDir": {}}
    )
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kafka-config", "namespace": namespace, "labels": _LABELS},
            "data": {
                "server.properties": server_properties(
                    namespace=namespace, host_address=host_address
                ),
                "cluster-id": new_cluster_id(),
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": SERVICE, "namespace": namespace, "labels": _LABELS},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": _LABELS},
                "template": {
                    "metadata": {"labels": _LABELS},
                    "spec": {
                        "terminationGracePeriodSeconds": 30,
                        "containers": [
                            {
                                "name": "kafka",
                                "image": image,
                                "imagePullPolicy": "Never",
                                # tini as PID 1: the broker gets SIGTERM and shuts down cleanly.
                                "command": ["/usr/bin/tini", "-s", "--", "/bin/sh", "-c"],
                                "args": [START_SCRIPT],
                                "env": [
                                    {
                                        "name": "KAFKA_CLUSTER_ID",
                                        "valueFrom": {
                                            "configMapKeyRef": {
                                                "name": "kafka-config",
                                                "key": "cluster-id",
                                            }
                                        },
                                    }
                                ],
                                "ports": [
                                    {"name": "kafka", "containerPort": CLUSTER_PORT},
                                    {"name": "kafka-host", "containerPort": HOST_PORT},
                                ],
                                "readinessProbe": {
                                    "tcpSocket": {"port": CLUSTER_PORT},
                                    "periodSeconds": 1,
                                },
                                "resources": {"requests": {"cpu": "50m", "memory": "640Mi"}},
                                "volumeMounts": [
                                    {"name": "jars", "mountPath": JARS_MOUNT, "readOnly": True},
                                    {
                                        "name": "config",
                                        "mountPath": CONFIG_MOUNT,
                                        "readOnly": True,
                                    },
                                    {"name": "data", "mountPath": DATA_MOUNT},
                                ],
                            }
                        ],
                        "volumes": [
                            {
                                "name": "jars",
                                "hostPath": {"path": str(jar_dir), "type": "Directory"},
                            },
                            {"name": "config", "configMap": {"name": "kafka-config"}},
                            data,
                        ],
                    },
                },
            },
        },
    ]


_LABELS = {"app.kubernetes.io/name": "kafka"}


def start_kafka(
    *,
    node: RealNode,
    image: str,
    jar_dir: Path,
    namespace: str = "kafka",
    data_path: Path | None = None,
    timeout: float = 180.0,
) -> ClusterKafka:
    """Deploy the broker into ``namespace`` (created if missing) from ``image`` (one
    with Java, imported into the node) and the jars in ``jar_dir`` (see
    :func:`e2e.kafka.jars.ensure_jars`); wait until a client on the host gets metadata."""
    rest = node.rest()
    _ensure_namespace(rest, namespace)
    if data_path is not None:
        data_path.mkdir(parents=True, exist_ok=True)
        os.chown(data_path, RUNTIME_UID, RUNTIME_UID)
    dns.apply(rest, service_manifest(namespace=namespace))
    service = rest.get(f"/api/v1/namespaces/{quote(namespace)}/services/{SERVICE}")
    address = str(service["spec"]["clusterIP"])
    for obj in manifests(namespace=namespace, host_address=address, image=image,
                         jar_dir=jar_dir, data_path=data_path):  # fmt: skip
        dns.apply(rest, obj)
    kafka = ClusterKafka(namespace=namespace, host_bootstrap=f"{address}:{HOST_PORT}")
    _wait_for_metadata(rest, kafka, timeout=timeout)
    return kafka


def _ensure_namespace(rest: RestClient, namespace: str) -> None:
    try:
        rest.request(
            "POST",
            "/api/v1/namespaces",
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
    except ApiError as err:
        if err.status != 409:
            raise


def _wait_for_metadata(rest: RestClient, kafka: ClusterKafka, *, timeout: float) -> None:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    # Asking librdkafka before the pod is ready only fills stderr with refused connections.
    while not _ready(rest, namespace=kafka.namespace):
        if time.monotonic() > deadline:
            raise NodeNotReadyError(
                f"the Kafka broker in {kafka.namespace} was not ready after {timeout:.0f}s"
            )
        time.sleep(0.5)
    admin = AdminClient({"bootstrap.servers": kafka.host_bootstrap})
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            brokers = admin.list_topics(timeout=2.0).brokers
            if brokers:
                return
        except Exception as exc:  # not answering yet
            last = exc
        time.sleep(0.5)
    raise NodeNotReadyError(
        f"the Kafka broker in {kafka.namespace} served no metadata at "
        f"{kafka.host_bootstrap}: {last!r}"
    )


def _ready(rest: RestClient, *, namespace: str) -> bool:
    with contextlib.suppress(ApiError):
        deployment = rest.get(f"/apis/apps/v1/namespaces/{quote(namespace)}/deployments/{SERVICE}")
        return int(deployment.get("status", {}).get("readyReplicas", 0)) >= 1
    return False
