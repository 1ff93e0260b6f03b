"""An S3 server in the cluster: versitygw (a real S3 gateway, built from its Go
module) with its POSIX backend, as a Deployment behind the Service ``s3``.

Jobs reach it at ``http://s3.<namespace>.svc.cluster.local:9000``; the host reaches
it at the Service's cluster IP (kube-proxy's rules cover the host too). Its
credentials are a Secret in the ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``
shape that ``spec.checkpoint.s3.credentialsSecret`` expects.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from e2e.controlplane.binaries import read_versions
from e2e.controlplane.rest import ApiError, RestClient, quote
from e2e.realnode import dns
from e2e.realnode.node import ImageArchive, NodeNotReadyError
from e2e.realnode.small_images import ImageFile, SmallImage, write_archive

S3_TAG = f"checkpointed-jobs/versitygw:{read_versions().versitygw.lstrip('v')}"
S3_PORT = 9000
SERVICE = "s3"
CREDENTIALS_SECRET = "s3-credentials"


@dataclass(frozen=True)
class ClusterS3:
    """Where the in-cluster S3 server answers and with which credentials."""

    namespace: str
    host_endpoint: str
    access_key_id: str
    secret_access_key: str

    @property
    def cluster_endpoint(self) -> str:
        return f"http://{SERVICE}.{self.namespace}.svc.cluster.local:{S3_PORT}"

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.host_endpoint,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}),
        )

    def credentials_secret(self, *, name: str = CREDENTIALS_SECRET) -> dict[str, Any]:
        """A Secret with these credentials, for a job's ``credentialsSecret``."""
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name},
            "stringData": {
                "AWS_ACCESS_KEY_ID": self.access_key_id,
                "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            },
        }


class ImageHost(Protocol):
    """A cluster's node that takes image archives (the real node, a kind cluster)."""

    @property
    def bin_dir(self) -> Path: ...

    @property
    def work_dir(self) -> Path: ...

    def import_image(self, archive: ImageArchive) -> None: ...

    def rest(self) -> RestClient: ...


def s3_image(*, bin_dir: Path) -> SmallImage:
    return SmallImage(
        tag=S3_TAG,
        files=(ImageFile(source=bin_dir / "versitygw", target="/versitygw"),),
        entrypoint=("/versitygw",),
    )


def manifests(
    *, namespace: str, access_key_id: str, secret_access_key: str, data_path: Path | None
) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": "s3"}
    volume: dict[str, Any] = (
        {"name": "data", "hostPath": {"path": str(data_path), "type": "DirectoryOrCreate"}}
        if data_path is not None
        else {"name": "data", "emptyDir": {}}
    )
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s3-root", "namespace": namespace},
            "stringData": {
                "ROOT_ACCESS_KEY_ID": access_key_id,
                "ROOT_SECRET_ACCESS_KEY": secret_access_key,
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": SERVICE, "namespace": namespace, "labels": labels},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "s3",
                                "image": S3_TAG,
                                "imagePullPolicy": "Never",
                                "args": [
                                    "--port",
                                    f":{S3_PORT}",
                                    "--health",
                                    "/health",
                                    "posix",
                                    "/data",
                                ],
                                "envFrom": [{"secretRef": {"name": "s3-root"}}],
                                "ports": [{"name": "s3", "containerPort": S3_PORT}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/health", "port": S3_PORT},
                                    "periodSeconds": 1,
                                },
                                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                            }
                        ],
                        "volumes": [volume],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": namespace, "labels": labels},
            "spec": {"selector": labels, "ports": [{"name": "s3", "port": S3_PORT}]},
        },
    ]


def start_s3(
    *,
    node: ImageHost,
    namespace: str,
    data_path: Path | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    timeout: float = 120.0,
) -> ClusterS3:
    """Deploy the S3 server into ``namespace`` (created if missing); wait until it
    answers from the host."""
    archive = node.work_dir / "images" / "versitygw.tar"
    write_archive(image=s3_image(bin_dir=node.bin_dir), path=archive)
    node.import_image(ImageArchive(tag=S3_TAG, path=archive))
    rest = node.rest()
    try:
        rest.request(
            "POST",
            "/api/v1/namespaces",
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
    except ApiError as err:
        if err.status != 409:
            raise
    access = access_key_id or "cjob" + secrets.token_hex(4)
    secret = secret_access_key or secrets.token_urlsafe(24)
    for obj in manifests(
        namespace=namespace, access_key_id=access, secret_access_key=secret, data_path=data_path
    ):
        dns.apply(rest, obj)
    service = rest.get(f"/api/v1/namespaces/{quote(namespace)}/services/{SERVICE}")
    s3 = ClusterS3(
        namespace=namespace,
        host_endpoint=f"http://{service['spec']['clusterIP']}:{S3_PORT}",
        access_key_id=access,
        secret_access_key=secret,
    )
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if _ready(rest, namespace=namespace):
            try:
                s3.client().list_buckets()
                return s3
            except Exception as exc:  # not answering yet
                last = exc
        time.sleep(0.5)
    raise NodeNotReadyError(f"the S3 server in {namespace} did not answer: {last!r}")


def _ready(rest: RestClient, *, namespace: str) -> bool:
    deployment = rest.get(f"/apis/apps/v1/namespaces/{quote(namespace)}/deployments/{SERVICE}")
    return int(deployment.get("status", {}).get("readyReplicas", 0)) >= 1
