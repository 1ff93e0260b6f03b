"""What the operator asks of the API server, counted by the API server itself.

The operator runs with a client identity of its own, whose requests the local control
plane's apiserver audits (``e2e.controlplane.audit``); the tests count them. At a
thousand jobs every request a pass makes without need is multiplied by every wake-up
of every job, so a pass must not re-read what its watches say has not changed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_live import JOBS_PATH, OperatorProcess, running_operator

from e2e.controlplane.audit import OPERATOR_USER, AuditRecord, read_audit_records
from e2e.controlplane.controlplane import ControlPlane
from e2e.controlplane.rest import RestClient, quote
from e2e.controlplane.waiting import wait_for
from e2e.jobs import running_sum_job

JOB = "quiet"
PASSES = re.compile(r"^cjob_operator_reconcile_seconds_count\s+(\S+)$", re.MULTILINE)


def passes(operator: OperatorProcess) -> int:
    found = PASSES.search(operator.metrics())
    return int(float(found.group(1))) if found else 0


@pytest.fixture
def audited_operator(control_plane: ControlPlane, kube_rest: RestClient, kube_namespace: str,
                     cjob_crd: None, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The operator under the audited identity; its jobs are deleted before it stops."""
    kubeconfig = control_plane.write_client_kubeconfig(
        name="audited-operator", user=OPERATOR_USER, groups=("system:masters",))
    with running_operator(rest=kube_rest, namespace=kube_namespace, kubeconfig=kubeconfig,
                          log_file=tmp_path / "operator.log") as operator:
        yield operator


def settle(operator: OperatorProcess) -> int:
    """Wait until the operator runs no more passes; their count then."""
    last = passes(operator)
    while True:
        time.sleep(1.0)
        now = passes(operator)
        if now == last:
            return now
        last = now


def bystander_pod(*, namespace: str) -> dict[str, Any]:
    """A pod labelled as the job's driver but of no attempt: its changes wake the job's
    loop (as a driver pod's would) without being anything the plan acts on. Bound to a
    node that does not exist, it stays Pending."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "bystander", "namespace": namespace,
                     "labels": {"checkpointed.io/job": JOB, "checkpointed.io/role": "driver"}},
        "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "none"}]},
    }  # fmt: skip


def reads_of_job_and_store(records: tuple[AuditRecord, ...], namespace: str) -> list[str]:
    return [record.kind for record in records
            if record.namespace == namespace and record.verb == "get"
            and record.resource in ("checkpointedjobs", "configmaps")]


def test_passes_woken_by_pod_news_do_not_read_the_unchanged_job_or_store_again(
    control_plane: ControlPlane, kube_rest: RestClient, kube_namespace: str,
    audited_operator: OperatorProcess, tmp_path: Path,
) -> None:
    job = running_sum_job(name=JOB, namespace=kube_namespace, work_dir=tmp_path, count=10,
                          rate=10, cleanup="Retain")
    job["spec"]["suspend"] = True
    kube_rest.request("POST", JOBS_PATH.format(namespace=quote(kube_namespace)), body=job)
    wait_for(lambda: (kube_rest.get(f"{JOBS_PATH.format(namespace=quote(kube_namespace))}/"
                                    f"{JOB}").get("status") or {}).get("phase") == "Suspended",
             what="the job to be Suspended", timeout=60)
    pods = f"/api/v1/namespaces/{quote(kube_namespace)}/pods"
    kube_rest.request("POST", pods, body=bystander_pod(namespace=kube_namespace))
    before = settle(audited_operator)
    start = read_audit_records(control_plane.audit_log).end
    wakes = 5
    for i in range(wakes):
        kube_rest.request("PATCH", f"{pods}/bystander",
                          body={"metadata": {"annotations": {"poke": str(i)}}},
                          content_type="application/merge-patch+json")
        time.sleep(0.5)  # longer than the loop's settle time: one pass per poke
    after = settle(audited_operator)
    assert after - before >= wakes - 1, "the pod's changes did not wake the job's loop"
    time.sleep(1.0)  # the apiserver writes an audit line after its answer
    records = read_audit_records(control_plane.audit_log, offset=start, user=OPERATOR_USER)
    kube_rest.request("DELETE", f"{pods}/bystander", body={"gracePeriodSeconds": 0})
    assert reads_of_job_and_store(records.records, kube_namespace) == []
