"""The node's own images (the pod sandbox and CoreDNS) and cluster DNS.

Cluster DNS is what Spark on Kubernetes relies on: executors dial the driver by
its headless Service name, ``<svc>.<namespace>.svc``. CoreDNS runs as an ordinary
Deployment in ``kube-system`` behind the Service ``kube-dns`` at 10.96.0.10, the
address the kubelet writes into every pod's ``resolv.conf``. It answers for the
cluster domain only: the machine has no upstream resolver that pods may use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e2e.controlplane.binaries import read_versions
from e2e.controlplane.rest import ApiError, RestClient, quote
from e2e.controlplane.waiting import plural_of
from e2e.realnode.small_images import ImageFile, SmallImage

CLUSTER_DNS_IP = "10.96.0.10"
NAMESPACE = "kube-system"


_VERSIONS = read_versions()
PAUSE_TAG = f"checkpointed-jobs/pause:{_VERSIONS.pause}"
COREDNS_TAG = f"checkpointed-jobs/coredns:{_VERSIONS.coredns.lstrip('v')}"

COREFILE = """\
.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        ttl 5
    }
    cache 5
    loadbalance
    reload
}
"""


def pause_image(*, bin_dir: Path) -> SmallImage:
    return SmallImage(
        tag=PAUSE_TAG,
        files=(ImageFile(source=bin_dir / "pause", target="/pause"),),
        entrypoint=("/pause",),
        user="65535",
    )


def coredns_image(*, bin_dir: Path) -> SmallImage:
    return SmallImage(
        tag=COREDNS_TAG,
        files=(ImageFile(source=bin_dir / "coredns", target="/coredns"),),
        entrypoint=("/coredns",),
    )


def manifests() -> list[dict[str, Any]]:
    """CoreDNS's identity, its read access to Services and EndpointSlices, its
    Corefile, the Deployment and the ``kube-dns`` Service."""
    labels = {"k8s-app": "kube-dns"}
    meta = {"name": "coredns", "namespace": NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": NAMESPACE}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {"Corefile": COREFILE},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {**meta, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "dnsPolicy": "Default",
                        "priorityClassName": "system-cluster-critical",
                        "containers": [
                            {
                                "name": "coredns",
                                "image": COREDNS_TAG,
                                "imagePullPolicy": "Never",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": [
                                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                ],
                                "resources": {
                                    "requests": {"cpu": "10m", "memory": "32Mi"},
                                    "limits": {"memory": "128Mi"},
                                },
                                "readinessProbe": {
                                    "httpGet": {"path": "/ready", "port": 8181},
                                    "periodSeconds": 1,
                                },
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns"}],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "selector": labels,
                "clusterIP": CLUSTER_DNS_IP,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
    ]


def apply(rest: RestClient, obj: dict[str, Any]) -> None:
    """Create ``obj``; an object that already exists is left as it is."""
    api_version: str = obj["apiVersion"]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    namespace = obj["metadata"].get("namespace")
    scope = f"/namespaces/{quote(namespace)}" if namespace else ""
    try:
        rest.request("POST", f"{base}{scope}/{plural_of(obj['kind'])}", body=obj)
    except ApiError as err:
        if err.status != 409:
            raise


def is_ready(rest: RestClient) -> bool:
    """Whether CoreDNS is Ready and the ``kube-dns`` Service has it as an endpoint."""
    deployment = rest.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/coredns")
    return int(deployment.get("status", {}).get("readyReplicas", 0)) >= 1
