"""What the real-node scenarios do to a cluster, as a user would: ``helm install``,
``kubectl create configmap``, ``kubectl apply``, kill pods, read the output.

Kept apart from the tests so that the cluster quick start (``make cluster``) and
the scenarios install the operator and run jobs with the same code.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from e2e.controlplane.rest import ApiError, RestClient, quote
from e2e.kind.chart import CHART_DIR, ChartRelease, run_command
from e2e.realnode.cluster_s3 import CREDENTIALS_SECRET, ClusterS3

JOBS_API = "/apis/checkpointed.io/v1alpha1"
OPERATOR_NAMESPACE = "cjob-system"
#: What the README's cluster quick start expects: the example's bucket and the
#: credentials Secret in namespace ``default``.
EXAMPLE_BUCKET = "running-sum"
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted",
              "pod-security.kubernetes.io/enforce-version": "latest"}  # fmt: skip
"""Pod Security "restricted", enforced: what a locked-down namespace asks of every pod."""

T = TypeVar("T")


class ScenarioTimeout(AssertionError):
    """A scenario waited in vain; says for what and what it saw last."""


def wait_until(
    check: Callable[[], T | None],
    *,
    what: str,
    timeout: float,
    interval: float = 0.25,
    detail: Callable[[], str] = lambda: "",
) -> T:
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = check()
        except (ApiError, OSError) as exc:
            value, last = None, exc
        if value:
            return value
        if time.monotonic() > deadline:
            raise ScenarioTimeout(f"{what}: not after {timeout:.0f}s (last: {last!r}) {detail()}")
        time.sleep(interval)


@dataclass
class Kubectl:
    """kubectl against the cluster, as its admin."""

    binary: Path
    kubeconfig: Path

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 120.0) -> str:
        return run_command(
            [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args],
            stdin=stdin,
            timeout=timeout,
        )


def install_operator(
    *,
    helm: Path,
    home: Path,
    kubeconfig: Path,
    operator_image: str,
    runtime_image: str,
    namespace: str = OPERATOR_NAMESPACE,
    release: str = "cjob",
) -> ChartRelease:
    """``helm install`` the chart with the operator image built here; wait for it."""
    repository, _, tag = operator_image.rpartition(":")
    runtime_repository, _, runtime_tag = runtime_image.rpartition(":")
    chart = ChartRelease(
        name=release,
        namespace=namespace,
        helm=helm,
        home=home,
        kubeconfig=kubeconfig,
        values={
            "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
            "runtimeImage": {"repository": runtime_repository, "tag": runtime_tag},
            "logLevel": "DEBUG",
        },
        chart_dir=CHART_DIR,
    )
    env_home = home / "values"
    env_home.mkdir(parents=True, exist_ok=True)
    chart._helm(
        "install", chart.name, str(CHART_DIR), "--namespace", namespace, "--create-namespace",
        "--values", str(_values_file(env_home, chart.values)), "--wait", "--timeout", "180s",
        timeout=240,
    )  # fmt: skip
    return chart


def install_restricted_operator(
    *, rest: RestClient, helm: Path, home: Path, kubeconfig: Path, operator_image: str,
    runtime_image: str,
) -> ChartRelease:  # fmt: skip
    """The chart's operator, as the scenarios install it: its own namespace enforces Pod
    Security "restricted" too."""
    rest.request("POST", "/api/v1/namespaces", body={
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": OPERATOR_NAMESPACE, "labels": RESTRICTED}})  # fmt: skip
    return install_operator(helm=helm, home=home, kubeconfig=kubeconfig,
                            operator_image=operator_image, runtime_image=runtime_image)  # fmt: skip


def prepare_quick_start(
    *, rest: RestClient, s3: ClusterS3, state_dir: Path, kubeconfig: Path
) -> None:
    """What ``make cluster`` leaves for a user: the example's bucket, the credentials
    Secret in ``default``, and ``kubeconfig`` and ``s3.env`` in ``state_dir``."""
    client = s3.client()
    if EXAMPLE_BUCKET not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
        client.create_bucket(Bucket=EXAMPLE_BUCKET)
    secret = s3.credentials_secret(name=CREDENTIALS_SECRET)
    try:
        rest.request("POST", "/api/v1/namespaces/default/secrets", body=secret)
    except ApiError as err:
        if err.status != 409:
            raise
    state_dir.mkdir(parents=True, exist_ok=True)
    target = state_dir / "kubeconfig"
    if target.resolve() != kubeconfig.resolve():
        target.write_bytes(kubeconfig.read_bytes())
    (state_dir / "s3.env").write_text(
        f"S3_ENDPOINT={s3.host_endpoint}\n"
        f"S3_ENDPOINT_IN_CLUSTER={s3.cluster_endpoint}\n"
        f"AWS_ACCESS_KEY_ID={s3.access_key_id}\n"
        f"AWS_SECRET_ACCESS_KEY={s3.secret_access_key}\n"
        f"S3_CREDENTIALS_SECRET={CREDENTIALS_SECRET}\n"
    )


def _values_file(folder: Path, values: dict[str, Any]) -> Path:
    path = folder / f"values-{secrets.token_hex(4)}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@dataclass
class JobHandle:
    """One CheckpointedJob in a namespace, observed through the apiserver."""

    rest: RestClient
    namespace: str
    name: str
    history: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        return f"{JOBS_API}/namespaces/{quote(self.namespace)}/checkpointedjobs/{quote(self.name)}"

    def get(self) -> dict[str, Any] | None:
        try:
            job: dict[str, Any] = self.rest.get(self.path)
            return job
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = (self.get() or {}).get("status", {})
        line = f"{status.get('phase')} attempt={status.get('attempt')}"
        if not self.history or self.history[-1] != line:
            self.history.append(line)
        return status

    def latest_checkpoint_id(self) -> int:
        return int((self.status().get("latestCheckpoint") or {}).get("id", 0))

    def pod(self, name: str) -> dict[str, Any] | None:
        try:
            pod: dict[str, Any] = self.rest.get(
                f"/api/v1/namespaces/{quote(self.namespace)}/pods/{quote(name)}"
            )
            return pod
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def pods(self, role: str) -> list[dict[str, Any]]:
        selector = f"checkpointed.io/job={self.name},checkpointed.io/role={role}"
        items: list[dict[str, Any]] = self.rest.get(
            f"/api/v1/namespaces/{quote(self.namespace)}/pods",
            query={"labelSelector": selector},
        )["items"]
        return items

    def running_executors(self) -> list[dict[str, Any]]:
        return [p for p in self.pods("executor") if p["status"].get("phase") == "Running"]

    def driver(self) -> dict[str, Any] | None:
        name = self.status().get("driverPod")
        return self.pod(name) if name else None

    def logs(self, pod: str) -> str:
        return self.rest.get_text(
            f"/api/v1/namespaces/{quote(self.namespace)}/pods/{quote(pod)}/log"
        )

    def events(self) -> list[str]:
        items = self.rest.get(
            f"/api/v1/namespaces/{quote(self.namespace)}/events",
            query={"fieldSelector": f"involvedObject.name={self.name}"},
        )["items"]
        return [f"{e.get('reason')}: {e.get('message')}" for e in items]

    def describe(self) -> str:
        return f"history={self.history} events={self.events()[-8:]}"


def _metrics_text(pod: dict[str, Any], *, port: int) -> str:
    """The driver's metrics endpoint, as served."""
    ip = pod["status"]["podIP"]
    with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=3) as resp:
        return str(resp.read().decode())


def driver_metrics(pod: dict[str, Any], *, port: int = 9108) -> dict[str, float]:
    """The driver's Prometheus samples (name without labels -> value)."""
    text = _metrics_text(pod, port=port)
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if match:
            samples[match.group(1)] = float(match.group(3))
    return samples


def driver_milestones(pod: dict[str, Any] | None, *, port: int = 9108) -> dict[str, float]:
    """The driver's ``cjob_job_milestone_timestamp_seconds`` (milestone -> Unix time)."""
    if not pod or not pod["status"].get("podIP"):
        return {}
    text = _metrics_text(pod, port=port)
    found = re.findall(r'^cjob_job_milestone_timestamp_seconds\{[^}]*milestone="([a-z_]+)"'
                       r'[^}]*\}\s+(\S+)', text, flags=re.MULTILINE)
    return {name: float(value) for name, value in found}


def records_flowing(pod: dict[str, Any] | None) -> bool:
    """Whether the driver in ``pod`` has processed records (its metrics say so)."""
    return bool(pod and pod["status"].get("podIP")) and (
        driver_metrics(pod or {}).get("cjob_job_records_in_total", 0) > 0)


def container_id(pod: dict[str, Any]) -> str:
    statuses = pod["status"].get("containerStatuses") or []
    raw = str(statuses[0].get("containerID", ""))
    return raw.split("://", 1)[-1]


def kill_container(
    ctr: Callable[..., subprocess.CompletedProcess[str]], pod: dict[str, Any]
) -> None:
    """SIGKILL the pod's container process, as the kernel's OOM killer or a crash would."""
    proc = ctr("tasks", "kill", "--signal", "SIGKILL", container_id(pod))
    if proc.returncode != 0:
        raise AssertionError(f"could not kill {pod['metadata']['name']}: {proc.stderr}")


def restored_id_from_logs(text: str) -> int | None:
    """The checkpoint id the driver says it restored (``restoring checkpoint N``)."""
    found = re.findall(r"restoring checkpoint (\d+)", text)
    return int(found[-1]) if found else None


def read_jsonl_objects(client: Any, *, bucket: str, prefix: str) -> list[dict[str, Any]]:
    """Every record of the visible (committed) output files under ``prefix``."""
    records: list[dict[str, Any]] = []
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            name = obj["Key"].rsplit("/", 1)[-1]
            if name.startswith((".", "_")) or "/_" in obj["Key"][len(prefix) :]:
                continue
            body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode()
            records.extend(json.loads(line) for line in body.splitlines() if line.strip())
    return records


def bucket_with_credentials(*, kubectl: Kubectl, s3: ClusterS3, namespace: str,
                            bucket: str) -> None:
    """A new bucket on the cluster's S3 server, and its credentials Secret in
    ``namespace`` for the job's pods."""
    s3.client().create_bucket(Bucket=bucket)
    kubectl("apply", "--namespace", namespace, "-f", "-",
            stdin=yaml.safe_dump(s3.credentials_secret()))  # fmt: skip


def list_keys(client: Any, *, bucket: str, prefix: str = "") -> list[str]:
    keys: list[str] = []
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(obj["Key"] for obj in page.get("Contents", []))
    return keys
