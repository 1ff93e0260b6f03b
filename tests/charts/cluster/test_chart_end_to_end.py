"""The chart installed the way users install it, running a job end to end.

``helm install`` puts the operator's Deployment, ServiceAccount and RBAC into the local
control plane; the process node runs the operator pod with a token of the chart's
ServiceAccount, so every call the operator makes is authorised by the chart's rules
alone. A CheckpointedJob applied with kubectl then runs on the process node; its
driver is killed after a checkpoint, and the job must restart from that checkpoint
and finish with exactly-once output. A second test installs the chart with one RBAC
rule removed and checks that the operator says so, instead of silently doing nothing.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from chart_operator import (
    ChartOperator,
    delete_jobs,
    describe,
    install_with_post_renderer,
    job_events,
)
from paths import REPO as REPO_ROOT
from paths import SUPPORT

from e2e.controlplane.rest import RestClient, quote
from e2e.controlplane.waiting import wait_for
from e2e.jobs import RUNNING_SUM_DIR, running_sum_job
from e2e.kind.chart import ChartRelease
from e2e.kind.chart_fixtures import with_free_ports

sys.path.insert(0, str(REPO_ROOT / "tests" / "operator_cluster"))
from operator_live import (
    JobWatcher,
    Kubectl,
    OperatorProcess,
)

sys.path.insert(0, str(RUNNING_SUM_DIR))
from verify import read_output, verify

COUNT = 10_000
RATE = 500
"""Records per second: the job runs about 20 s, so the kill lands mid-run."""

StartOperator = Callable[..., ChartOperator]


@pytest.fixture
def job_kubectl(control_plane: Any, kubectl_bin: Path) -> Kubectl:
    return Kubectl(binary=kubectl_bin, kubeconfig=Path(control_plane.kubeconfig))


@pytest.fixture
def chart_operator(
    control_plane: Any,
    process_node: Any,
    kube_rest: RestClient,
    kube_namespace: str,
    helm_bin: Path,
    helm_home: Path,
) -> Iterator[StartOperator]:
    """A factory installing the chart into the test's namespace, watching only it.

    ``post_renderer_args`` installs through ``helm install --post-renderer``. After
    the test the namespace's jobs are deleted while the operator still runs (their
    finalizers need it), then the release is uninstalled.
    """
    started: list[ChartOperator] = []

    def start(
        values: dict[str, Any] | None = None, *, post_renderer_args: list[str] | None = None
    ) -> ChartOperator:
        release = ChartRelease(
            name=f"e2e-{secrets.token_hex(3)}",
            namespace=kube_namespace,
            helm=helm_bin,
            home=helm_home,
            kubeconfig=Path(control_plane.kubeconfig),
            values=with_free_ports({"watchNamespaces": [kube_namespace],
                                    "rbac": {"create": True}, **(values or {})}),
        )  # fmt: skip
        operator = ChartOperator(release=release, rest=kube_rest, process_node=process_node)
        started.append(operator)
        if post_renderer_args:
            install_with_post_renderer(release, post_renderer_args=post_renderer_args)
        else:
            release.install()
        operator.wait_healthy(timeout=180)
        return operator

    yield start
    for operator in reversed(started):
        try:
            delete_jobs(kube_rest, namespace=kube_namespace)
        except Exception as exc:  # never hide the test's own result
            print(f"cleanup of {kube_namespace} incomplete: {exc}\n{operator.log_tail()}")
        finally:
            operator.release.uninstall(missing_ok=True)


def watch(rest: RestClient, operator: ChartOperator, *, name: str) -> JobWatcher:
    # JobWatcher only reads the operator's log tail, which ChartOperator offers too.
    return JobWatcher(rest=rest, namespace=operator.namespace, name=name,
                      operator=cast(OperatorProcess, operator))  # fmt: skip


def job_pods(rest: RestClient, *, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = rest.get(
        f"/api/v1/namespaces/{quote(namespace)}/pods",
        query={"labelSelector": f"checkpointed.io/job={job}"},
    )["items"]
    return items


def test_a_chart_installed_operator_restarts_a_killed_driver_from_its_checkpoint_exactly_once(
    chart_operator: StartOperator,
    job_kubectl: Kubectl,
    kube_rest: RestClient,
    kube_namespace: str,
    process_node: Any,
    tmp_path: Path,
) -> None:
    operator = chart_operator()
    (pod,) = operator.pods()
    assert pod["spec"]["nodeName"] == "process-node"
    assert pod["spec"]["serviceAccountName"] == operator.release.fullname
    assert pod["spec"]["containers"][0]["command"] == ["python", "-m", "cjob_operator"]

    job = running_sum_job(name="sums", namespace=kube_namespace, work_dir=tmp_path,
                          count=COUNT, rate=RATE)  # fmt: skip
    assert job["spec"]["parallelism"] == 2
    assert job["spec"]["spark"]["master"] == "local[2]"
    assert job["spec"]["restartPolicy"]["backoff"]["initial"] == "1s"
    applied = job_kubectl.apply(job)
    assert applied.returncode == 0, applied.stderr
    sums = watch(kube_rest, operator, name="sums")

    first = sums.until(lambda s: s.get("phase") == "Running"
                       and (s.get("latestCheckpoint") or {}).get("id", 0) >= 1,
                       what="attempt 1 to run and complete a checkpoint",
                       timeout=240)  # fmt: skip
    assert first["attempt"] == 1 and first["driverPod"] == "sums-attempt-1"
    checkpointed = sums.status()["latestCheckpoint"]["id"]

    assert process_node.kill_pod_process(namespace=kube_namespace, name="sums-attempt-1") > 0

    second = sums.until(lambda s: s.get("attempt") == 2 and s.get("phase") == "Running"
                        and "restoredFrom" in s,
                        what="attempt 2 to run and report its restore", timeout=180)  # fmt: skip
    assert second["restarts"] == 1
    assert second["driverPod"] == "sums-attempt-2"
    assert second["lastFailure"]["exitCode"] == 137
    assert second["restoredFrom"]["id"] >= max(1, checkpointed), describe(second)
    assert "Restarted" in sums.event_reasons()

    done = sums.until(lambda s: s.get("phase") in ("Succeeded", "Failed"),
                      what="the job to finish", timeout=300)  # fmt: skip
    assert done["phase"] == "Succeeded", describe(done)
    assert done["attempt"] == 2 and done["restarts"] == 1
    problems = verify(read_output(tmp_path / "output"), count=COUNT)
    assert problems == [], problems[:5]

    # Everything above ran under the chart's RBAC: the operator met no refusal.
    log = process_node.read_pod_log(namespace=kube_namespace, name=pod["metadata"]["name"])
    refusals = [line for line in log.splitlines() if "forbidden" in line.lower()]
    assert refusals == [], "\n".join(refusals)
    assert 'cjob_operator_restarts_total{reason="Killed"} 1.0' in operator.metrics()


def test_a_chart_missing_the_pod_create_rule_makes_the_operator_report_the_refusal(
    chart_operator: StartOperator,
    job_kubectl: Kubectl,
    kube_rest: RestClient,
    kube_namespace: str,
    tmp_path: Path,
) -> None:
    operator = chart_operator(post_renderer_args=[
        str(SUPPORT / "drop_rbac_rule.py"), "pods:create"])  # fmt: skip
    role = kube_rest.get(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/"
        f"{quote(kube_namespace)}/roles/{quote(operator.release.fullname)}"
    )
    pod_verbs = {verb for rule in role["rules"] if "pods" in rule["resources"]
                 for verb in rule["verbs"]}  # fmt: skip
    assert "create" not in pod_verbs and "delete" in pod_verbs, role["rules"]

    job = running_sum_job(name="denied", namespace=kube_namespace, work_dir=tmp_path,
                          count=100, rate=100)  # fmt: skip
    applied = job_kubectl.apply(job)
    assert applied.returncode == 0, applied.stderr
    denied = watch(kube_rest, operator, name="denied")

    status = denied.until(lambda s: s.get("reason") == "DriverCreateFailed",
                          what="the refused driver pod in the status", timeout=120)  # fmt: skip
    assert "forbidden" in status["message"], status["message"]
    assert "denied-attempt-1" in status["message"]

    def refusal_event() -> dict[str, Any] | None:
        for event in job_events(kube_rest, namespace=kube_namespace, name="denied"):
            if event.get("type") == "Warning" and "forbidden" in (event.get("message") or ""):
                return event
        return None

    event = wait_for(refusal_event, what="a Warning Event about the refusal", timeout=60)
    assert event["reason"] == "ReconcileError"
    assert 'cannot create resource "pods"' in event["message"], event["message"]
    assert job_pods(kube_rest, namespace=kube_namespace, job="denied") == []
    assert operator.is_healthy()


def test_a_chart_installed_operator_that_may_read_no_secret_deletes_a_jobs_s3_checkpoints(
    chart_operator: StartOperator,
    job_kubectl: Kubectl,
    kube_rest: RestClient,
    kube_namespace: str,
    process_node: Any,
    s3_bucket: Any,
    tmp_path: Path,
) -> None:
    """cleanupPolicy Delete with the credentials in a Secret: the cleanup pod gets them
    from the kubelet, the operator (chart RBAC only) never asks for them."""
    operator = chart_operator()
    kube_rest.request("POST", f"/api/v1/namespaces/{quote(kube_namespace)}/secrets", body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds"},
        "stringData": {"AWS_ACCESS_KEY_ID": s3_bucket.s3_config.access_key_id,
                       "AWS_SECRET_ACCESS_KEY": s3_bucket.s3_config.secret_access_key},
    })  # fmt: skip
    job = running_sum_job(
        name="s3job", namespace=kube_namespace, work_dir=tmp_path, count=100, rate=100,
        storage=f"s3://{s3_bucket.bucket}/ckpt",
        s3={"endpoint": s3_bucket.endpoint_url, "region": "us-east-1",
            "credentialsSecret": "s3-creds"},
    )  # fmt: skip
    job["spec"]["suspend"] = True
    assert job_kubectl.apply(job).returncode == 0
    s3job = watch(kube_rest, operator, name="s3job")
    s3job.until(lambda s: s.get("phase") == "Suspended", what="Suspended", timeout=120)
    uid = s3job.get()["metadata"]["uid"]  # type: ignore[index]
    keys = [f"ckpt/s3job-{uid}/chk-1/_metadata", "ckpt/other-job/chk-1/_metadata"]
    for key in keys:
        s3_bucket.client.put_object(Bucket=s3_bucket.bucket, Key=key, Body=b"x")

    assert job_kubectl.run("-n", kube_namespace, "delete", "checkpointedjob", "s3job",
                           "--wait=true", "--timeout=90s").returncode == 0  # fmt: skip
    listed = s3_bucket.client.list_objects_v2(Bucket=s3_bucket.bucket).get("Contents", [])
    assert [item["Key"] for item in listed] == keys[1:]
    reasons = [e["reason"] for e in job_events(kube_rest, namespace=kube_namespace,
                                               name="s3job")]  # fmt: skip
    assert "CheckpointsDeleted" in reasons and "CheckpointsRetained" not in reasons, reasons
    (pod,) = operator.pods()
    log = process_node.read_pod_log(namespace=kube_namespace, name=pod["metadata"]["name"])
    refusals = [line for line in log.splitlines() if "forbidden" in line.lower()]
    assert refusals == [], "\n".join(refusals)
