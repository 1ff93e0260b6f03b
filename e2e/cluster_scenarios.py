"""Scenarios that run the same on every cluster the project tests on: the real node
(``tests/e2e/realnode/``) and kind (``tests/e2e/kind/``). A cluster is anything with
the :class:`ScenarioCluster` methods; each fixture brings its own way to kill a
container (``ctr`` on the real node, ``ctr`` inside the node container on kind)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

import yaml

from e2e.controlplane.rest import RestClient, quote
from e2e.jobs import RUNNING_SUM_DIR
from e2e.realnode import running_sum, scenario
from e2e.realnode.cluster_s3 import CREDENTIALS_SECRET, ClusterS3

COUNT = 120_000
RATE = 3_000  # records per second: about 40 s of input, so kills land mid-run


class ScenarioCluster(Protocol):
    """What a scenario needs of a cluster."""

    @property
    def runtime_image(self) -> str: ...

    def rest(self) -> RestClient: ...

    def kill_container(self, pod: dict[str, Any]) -> None:
        """SIGKILL the pod's (first) container, as a crash or the OOM killer would."""
        ...


def verify_output(records: list[dict[str, Any]], *, count: int) -> list[str]:
    """The running-sum example's own check of its output."""
    if str(RUNNING_SUM_DIR) not in sys.path:
        sys.path.insert(0, str(RUNNING_SUM_DIR))
    from verify import verify

    problems: list[str] = verify(records, count=count)
    return problems


def finished(job: scenario.JobHandle, *, timeout: float = 400) -> dict[str, Any]:
    """The job's status once it is Succeeded or Failed."""

    def final() -> dict[str, Any] | None:
        status = job.status()
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    return scenario.wait_until(final, what="the job to finish", timeout=timeout,
                               detail=job.describe)  # fmt: skip


def apply_s3_job(
    *, rest: RestClient, kubectl: scenario.Kubectl, s3: ClusterS3, namespace: str, name: str,
    master: str, cleanup: str = "Retain", standby: bool = False,
    checkpoints: str = "checkpoints", output: str = "output", rocksdb: bool = False,
    driver_cores: str | None = None, count: int = COUNT,
    executor_request_cores: str | None = None, start_timeout: str | None = None,
    pod: dict[str, Any] | None = None,
) -> tuple[scenario.JobHandle, str]:  # fmt: skip
    """The running sum with its code from a ConfigMap and its checkpoints and output in
    an S3 bucket of its own (under the prefixes ``checkpoints`` and ``output``),
    applied with kubectl; returns the job and the bucket.

    With ``standby`` it asks for a warm standby driver; both drivers then ask for a
    fraction of a core, or the two-CPU node could not schedule the second.
    ``driver_cores`` is the driver's CPU request (Spark's default: one core);
    ``executor_request_cores`` each executor's (a fraction of a core unless given), and
    ``start_timeout`` the restart policy's; ``pod`` adds to ``spec.pod`` (which mounts
    the job's code)."""
    bucket = f"{name}-{namespace[-6:]}"
    scenario.bucket_with_credentials(kubectl=kubectl, s3=s3, namespace=namespace,
                                        bucket=bucket)
    running_sum.code_configmap(kubectl, namespace)
    manifest = running_sum.manifest(
        name=name, storage=f"s3://{bucket}/{checkpoints}", output=f"s3://{bucket}/{output}",
        master=master, s3=running_sum.s3_settings(s3), count=count, rate=RATE, cleanup=cleanup,
        pod={"volumes": [running_sum.CODE_VOLUME], "volumeMounts": [running_sum.CODE_MOUNT],
             **(pod or {})},
    )  # fmt: skip
    if rocksdb:
        manifest["spec"]["state"] = {"backend": "rocksdb"}
    if standby:
        manifest["spec"]["standby"] = {"enabled": True}
        driver_cores = driver_cores or "300m"
    conf = manifest["spec"]["spark"].setdefault("conf", {})
    if driver_cores is not None:
        conf["spark.kubernetes.driver.request.cores"] = driver_cores
    if executor_request_cores is not None:
        conf["spark.kubernetes.executor.request.cores"] = executor_request_cores
    if start_timeout is not None:
        manifest["spec"]["restartPolicy"]["startTimeout"] = start_timeout
    kubectl("apply", "--namespace", namespace, "-f", "-", stdin=yaml.safe_dump(manifest))
    return scenario.JobHandle(rest=rest, namespace=namespace, name=name), bucket


TEMPLATE_LABEL = "example.org/team"
EXECUTOR_POD: dict[str, Any] = {
    "envFrom": [{"secretRef": {"name": CREDENTIALS_SECRET},
                 "prefix": "FROM_SECRET_"}],
    "executorTemplate": {
        "metadata": {"labels": {TEMPLATE_LABEL: "ads"}},
        "spec": {"containers": [{"name": "spark-kubernetes-executor",
                                 "env": [{"name": "FROM_TEMPLATE", "value": "1"}]}]},
    },
}
"""What the executor-kill scenario's job adds to ``spec.pod``, checked on its executors."""


def executor_and_driver_kills(
    *,
    cluster: ScenarioCluster,
    namespace: str,
    s3: ClusterS3,
    kubectl: scenario.Kubectl,
    record_property: Callable[[str, object], None],
) -> None:
    """A ``master: k8s`` job (Spark executor pods) in a namespace enforcing Pod Security
    "restricted", with checkpoints and output on S3: an executor killed (the barrier
    stage relaunches in the same driver), then the driver killed (the operator's next
    attempt restores the latest checkpoint), and the output checked exactly-once. The
    operator of the chart must already watch ``namespace``."""
    rest = cluster.rest()
    client = s3.client()
    created_at = time.monotonic()
    real_namespace = namespace
    # A fraction of a core for the driver: on kind the control plane (850m of requests)
    # shares the two-CPU node with the job.
    # The executors get what spec.pod gives every pod (every key of a Secret, through
    # envFrom) and what their own template adds (a label, a variable).
    job, bucket = apply_s3_job(rest=rest, kubectl=kubectl, s3=s3, namespace=real_namespace,
                               name="sum", master="k8s", driver_cores="300m",
                               pod=EXECUTOR_POD)  # fmt: skip

    # The baseline of the recovery times below, in the same run: a cold start.
    scenario.wait_until(lambda: scenario.records_flowing(job.driver()),
                        what="the first records", timeout=300,
                        detail=job.describe)  # fmt: skip
    cold_start = time.monotonic() - created_at
    record_property("cold_start_to_first_record_s", round(cold_start, 1))

    # Spark created the executors as pods of the runtime image, and a checkpoint completed.
    def two_executors() -> list[dict[str, Any]] | None:
        running = job.running_executors()
        return running if len(running) == 2 else None

    executors = scenario.wait_until(two_executors, what="two running executor pods",
                                    timeout=240, detail=job.describe)  # fmt: skip
    assert all(p["spec"]["containers"][0]["image"] == cluster.runtime_image for p in executors)
    # In a namespace enforcing Pod Security "restricted": the executors got their
    # security context from the operator's pod template. Spark's own RPC
    # authenticates with the job's Secret, mounted as a file: no secret in the pod spec.
    for pod in executors:
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        container = pod["spec"]["containers"][0]
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
        env = {e["name"]: e for e in container.get("env", [])}
        assert "value" not in env["_SPARK_AUTH_SECRET"], "the key is only referenced"
        assert env["_SPARK_AUTH_SECRET"]["valueFrom"]["secretKeyRef"]["name"] == "sum-spark-auth"
        assert pod["metadata"]["labels"][TEMPLATE_LABEL] == "ads"
    # The kubelet resolved the Secret's keys into the executor container's environment.
    seen = kubectl("exec", "--namespace", real_namespace, executors[0]["metadata"]["name"],
                   "-c", "spark-kubernetes-executor", "--", "env")
    environment = dict(line.split("=", 1) for line in seen.splitlines() if "=" in line)
    assert environment.get("FROM_SECRET_AWS_ACCESS_KEY_ID") == s3.access_key_id, sorted(environment)
    assert environment.get("FROM_TEMPLATE") == "1", sorted(environment)
    policy = rest.request("GET", f"/apis/networking.k8s.io/v1/namespaces/"
                                 f"{quote(real_namespace)}/networkpolicies/sum-pods")
    assert policy["spec"]["podSelector"]["matchLabels"]["checkpointed.io/job"] == "sum"
    scenario.wait_until(lambda: job.latest_checkpoint_id() >= 2, what="checkpoint 2",
                        timeout=180, detail=job.describe)  # fmt: skip
    first_driver = job.status()["driverPod"]

    # 1. Kill an executor: Spark relaunches the barrier stage in the same driver, from
    #    the latest checkpoint.
    driver = job.driver()
    assert driver is not None
    before = scenario.driver_metrics(driver)
    victim = executors[0]
    killed_at = time.monotonic()
    cluster.kill_container(victim)
    scenario.wait_until(
        lambda: scenario.driver_metrics(driver).get("cjob_job_subtask_restarts_total", 0)
        > before.get("cjob_job_subtask_restarts_total", 0),
        what="the barrier stage relaunched", timeout=180, detail=job.describe,
    )  # fmt: skip
    scenario.wait_until(
        lambda: scenario.driver_metrics(driver).get("cjob_job_records_in_total", 0) > 0,
        what="records flowing again after the executor kill", timeout=180, detail=job.describe,
    )  # fmt: skip
    executor_recovery = time.monotonic() - killed_at
    record_property("executor_kill_to_first_record_s", round(executor_recovery, 1))
    assert job.status()["driverPod"] == first_driver, "an executor kill must not restart the driver"
    assert job.status().get("restarts", 0) == 0

    # 2. Kill the driver: the operator starts the next attempt from the latest checkpoint.
    checkpoint_before_kill = scenario.wait_until(
        lambda: job.latest_checkpoint_id() or None, what="a checkpoint", timeout=60
    )
    killed_at = time.monotonic()
    cluster.kill_container(job.driver() or {})

    def next_driver() -> str | None:
        name = job.status().get("driverPod")
        return str(name) if name and name != first_driver else None

    second = scenario.wait_until(next_driver, what="a second attempt", timeout=120,
                                 detail=job.describe)  # fmt: skip
    scenario.wait_until(lambda: scenario.records_flowing(job.pod(second)),
                        what="records flowing in the second attempt", timeout=240,
                        detail=job.describe)  # fmt: skip
    driver_recovery = time.monotonic() - killed_at
    record_property("driver_kill_to_first_record_s", round(driver_recovery, 1))

    done = finished(job)
    assert done["phase"] == "Succeeded", job.describe()
    assert done["restarts"] == 1

    restored = scenario.restored_id_from_logs(job.logs(second))
    assert restored is not None and restored >= checkpoint_before_kill
    assert done["restoredFrom"]["id"] == restored

    records = scenario.read_jsonl_objects(client, bucket=bucket, prefix="output/")
    assert verify_output(records, count=COUNT) == []
    print(f"cold start -> first record {cold_start:.1f}s; "
          f"executor kill -> first record {executor_recovery:.1f}s "
          f"({executor_recovery / cold_start:.2f}x); "
          f"driver kill -> first record {driver_recovery:.1f}s "
          f"({driver_recovery / cold_start:.2f}x)")  # fmt: skip
