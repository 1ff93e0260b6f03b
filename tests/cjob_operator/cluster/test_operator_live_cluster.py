"""The operator against a real API server, with driver pods running on the process node.

These tests run the operator as a subprocess exactly as the Helm chart does (minus the
container), apply CheckpointedJobs with kubectl, and check what a user relies on:
schema errors at apply time, a killed driver restarted from its latest checkpoint
with exactly-once output, suspend and resume, manual checkpoints, permanent failures
that stop, and deletion that cleans up when asked to.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from operator_live import (
    JobWatcher,
    Kubectl,
    OperatorProcess,
    install_kopf_peering,
)
from pod_settings import runtime_settings_of

from e2e.controlplane.rest import MERGE_PATCH, ApiError, quote
from e2e.controlplane.waiting import pod_is_ready, wait_for
from e2e.jobs import RUNNING_SUM_DIR, running_sum_job

sys.path.insert(0, str(RUNNING_SUM_DIR))
from verify import read_output, verify


def watcher(kube_rest: Any, namespace: str, name: str, operator: OperatorProcess) -> JobWatcher:
    return JobWatcher(rest=kube_rest, namespace=namespace, name=name, operator=operator)


# --- the API server refuses bad specs --------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"checkpoint": {"storage": "file:///ckpt", "retained": 0}}, "retained must be >= 1"),
        ({"spark": {"master": "yarn"}}, "must be 'k8s', 'local[N]'"),
        ({"checkpoint": {"storage": "hdfs://nn/ckpt"}}, "file:///absolute/path or s3://"),
        ({"parallelism": 0}, "spec.parallelism"),
        ({"pod": {"volumeMounts": [{"name": "data"}]}}, "spec.pod.volumeMounts[0].mountPath"),
        ({"autoscaler": {"mode": "Apply", "min": 5, "max": 2}},
         "spec.autoscaler: Invalid value: min must be <= max"),
    ],
    ids=["retained-0", "bad-master", "bad-storage", "parallelism-0", "mount-without-path",
         "autoscaler-min-above-max"],
)
def test_the_api_server_refuses_a_bad_spec_with_a_clear_message(
    kubectl: Kubectl, kube_namespace: str, cjob_crd: None, tmp_path: Path,
    change: dict[str, Any], expected: str,
) -> None:
    job = running_sum_job(name="bad", namespace=kube_namespace, work_dir=tmp_path,
                          count=10, rate=10)
    job["spec"].update(change)
    result = kubectl.apply(job)
    assert result.returncode != 0
    assert "is invalid" in result.stderr
    assert expected in result.stderr


def test_a_job_name_too_long_for_pod_names_is_refused(
    kubectl: Kubectl, kube_namespace: str, cjob_crd: None, tmp_path: Path
) -> None:
    job = running_sum_job(name="a" * 41, namespace=kube_namespace, work_dir=tmp_path,
                          count=10, rate=10)
    result = kubectl.apply(job)
    assert result.returncode != 0
    assert "at most 40" in result.stderr


# --- the life of a job ---------------------------------------------------------------------


def test_a_killed_driver_restarts_from_its_checkpoint_suspends_resumes_and_finishes_exactly_once(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, process_node: Any,
    cjob_operator: OperatorProcess, tmp_path: Path,
) -> None:
    count = 16_000
    job = running_sum_job(name="sums", namespace=kube_namespace, work_dir=tmp_path,
                          count=count, rate=500)
    applied = kubectl.apply(job)
    assert applied.returncode == 0, applied.stderr
    sums = watcher(kube_rest, kube_namespace, "sums", cjob_operator)

    # Attempt 1 runs and checkpoints.
    first = sums.until(lambda s: s.get("phase") == "Running"
                       and s.get("latestCheckpoint", {}).get("id", 0) >= 2,
                       what="attempt 1 to run and complete two checkpoints", timeout=180)
    assert first["attempt"] == 1 and first["driverPod"] == "sums-attempt-1"
    uid = sums.get()["metadata"]["uid"]  # type: ignore[index]

    # A manual checkpoint through spec.checkpoint.triggerNonce is served and acknowledged.
    kubectl.patch_job(kube_namespace, "sums", {"spec": {"checkpoint": {"triggerNonce": "m-1"}}})
    sums.until(lambda s: s.get("lastTriggerNonce") == "m-1", what="the nonce to be handled")
    acked = wait_for(
        lambda: (sums.configmap() or {}).get("metadata", {}).get("annotations", {})
        .get("checkpointed.io/checkpoint-request-ack", "").startswith("m-1:"),
        what="the driver to acknowledge checkpoint request m-1", timeout=60)
    assert acked
    assert sums.configmap()["metadata"]["annotations"][  # type: ignore[index]
        "checkpointed.io/checkpoint-request"] == "m-1"

    # Kill the driver: attempt 2 restores from the latest checkpoint.
    killed_at = sums.status()["latestCheckpoint"]["id"]
    assert process_node.kill_pod_process(namespace=kube_namespace, name="sums-attempt-1") > 0
    # restoredFrom is what the driver reports it restored, once it has.
    second = sums.until(lambda s: s.get("attempt") == 2 and s.get("phase") == "Running"
                        and "restoredFrom" in s,
                        what="attempt 2 to run and report its restore", timeout=120)
    assert second["restarts"] == 1
    assert second["driverPod"] == "sums-attempt-2"
    assert second["restoredFrom"]["id"] >= killed_at
    assert second["lastFailure"]["reason"] == "Killed"
    assert second["lastFailure"]["exitCode"] == 137
    reasons = sums.event_reasons()
    assert "Killed" in reasons and "Restarted" in reasons
    restored = second["restoredFrom"]["id"]
    settings = runtime_settings_of(
        kube_rest.get(f"/api/v1/namespaces/{kube_namespace}/pods/sums-attempt-2"))
    assert settings.restore == "latest"
    assert settings.attempt == 2
    fence = sums.configmap()["metadata"]["annotations"]["checkpointed.io/fence-attempt"]  # type: ignore[index]
    assert fence == "2"

    # Suspend after attempt 2 has checkpointed: a final checkpoint, then the driver goes.
    sums.until(lambda s: s.get("latestCheckpoint", {}).get("id", 0) > restored,
               what="attempt 2 to complete a checkpoint", timeout=120)
    kubectl.patch_job(kube_namespace, "sums", {"spec": {"suspend": True}})
    suspended = sums.until(lambda s: s.get("phase") == "Suspended", what="Suspended",
                           timeout=120)
    assert "final checkpoint" in suspended["message"], suspended["message"]
    wait_for(lambda: "sums-attempt-2" not in sums.pod_names(), what="the driver pod to go",
             timeout=90)
    final_checkpoint = suspended["latestCheckpoint"]["id"]

    # Resume: attempt 3 starts from the final checkpoint and the job finishes.
    kubectl.patch_job(kube_namespace, "sums", {"spec": {"suspend": False}})
    third = sums.until(lambda s: s.get("attempt") == 3 and "restoredFrom" in s,
                       what="attempt 3 to report its restore", timeout=120)
    assert third["restoredFrom"]["id"] == final_checkpoint
    done = sums.until(lambda s: s.get("phase") in ("Succeeded", "Failed"),
                      what="the job to finish", timeout=240)
    assert done["phase"] == "Succeeded", done
    assert done["attempt"] == 3

    problems = verify(read_output(tmp_path / "output"), count=count)
    assert problems == [], problems[:5]

    metrics = cjob_operator.metrics()
    assert 'cjob_operator_restarts_total{reason="Killed"} 1.0' in metrics
    assert 'cjob_operator_jobs{phase="Succeeded"} 1.0' in metrics
    assert "cjob_operator_restore_total 2.0" in metrics

    # Deleting with cleanupPolicy Delete removes the checkpoints and their ConfigMap.
    checkpoint_dir = tmp_path / "checkpoints" / f"sums-{uid}"
    assert checkpoint_dir.is_dir()
    assert kubectl.run("-n", kube_namespace, "delete", "checkpointedjob", "sums",
                       "--wait=true", "--timeout=90s").returncode == 0
    assert sums.get() is None
    assert not checkpoint_dir.exists()
    reasons = sums.event_reasons()
    assert "DeletingCheckpoints" in reasons and "CheckpointsDeleted" in reasons, reasons
    wait_for(lambda: sums.configmap() is None, what="the checkpoint ConfigMap to go", timeout=60)


def _refuse_promotions(kube_rest: Any, namespace: str) -> tuple[str, str]:
    """An admission policy that refuses to relabel a standby pod of ``namespace`` as a
    driver: the second write of a promotion fails until the policy goes. Returns the
    paths of the policy and of its binding."""
    name = f"refuse-promotions-{namespace}"
    base = "/apis/admissionregistration.k8s.io/v1"
    role = "'checkpointed.io/role'"
    kube_rest.request("POST", f"{base}/validatingadmissionpolicies", body={
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                "resources": ["pods"]}]},
            "validations": [{
                "expression": (
                    f"!(has(oldObject.metadata.labels) && {role} in oldObject.metadata.labels"
                    f" && oldObject.metadata.labels[{role}] == 'standby'"
                    f" && has(object.metadata.labels) && {role} in object.metadata.labels"
                    f" && object.metadata.labels[{role}] == 'driver')"),
                "message": "promotions are refused in this namespace for now"}],
        },
    })
    kube_rest.request("POST", f"{base}/validatingadmissionpolicybindings", body={
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {
                     "kubernetes.io/metadata.name": namespace}}}},
    })
    return (f"{base}/validatingadmissionpolicies/{name}",
            f"{base}/validatingadmissionpolicybindings/{name}")


def _promotion_refused(kube_rest: Any, pod: str) -> bool:
    """Whether relabelling ``pod`` as a driver is refused now (tried as a dry run)."""
    try:
        kube_rest.request("PATCH", pod, query={"dryRun": "All"},
                          content_type=MERGE_PATCH,
                          body={"metadata": {"labels": {"checkpointed.io/role": "driver"}}})
    except ApiError as exc:
        return "promotions are refused" in str(exc)
    return False


def test_a_killed_driver_is_replaced_by_its_warm_standby_once_even_if_the_promotion_stalls(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, process_node: Any,
    cjob_operator: OperatorProcess, tmp_path: Path,
) -> None:
    """The promotion is three writes (the store's record, the pod's labels, the status);
    the API server refuses the second until a policy goes. The takeover still happens
    once: one restart counted, the same standby promoted, no new driver pod."""
    count = 12_000
    job = running_sum_job(name="warm", namespace=kube_namespace, work_dir=tmp_path,
                          count=count, rate=500, backoff=("0s", "0s"))
    job["spec"]["standby"] = {"enabled": True}
    applied = kubectl.apply(job)
    assert applied.returncode == 0, applied.stderr
    warm = watcher(kube_rest, kube_namespace, "warm", cjob_operator)
    pods = f"/api/v1/namespaces/{kube_namespace}/pods"

    # Attempt 1 runs and checkpoints; its standby is started and turns Ready once its
    # Spark is started and the job's code loaded (the readiness probe).
    warm.until(lambda s: s.get("phase") == "Running"
               and s.get("latestCheckpoint", {}).get("id", 0) >= 2,
               what="attempt 1 to run and complete two checkpoints", timeout=180)
    wait_for(lambda: pod_is_ready(kube_rest.get(f"{pods}/warm-standby-1")),
             what="the standby to turn Ready", timeout=180)
    standby = kube_rest.get(f"{pods}/warm-standby-1")
    assert standby["metadata"]["labels"]["checkpointed.io/role"] == "standby"

    # Kill the driver: the standby takes attempt 2 through the store; no new driver pod.
    policy, binding = _refuse_promotions(kube_rest, kube_namespace)
    wait_for(lambda: _promotion_refused(kube_rest, f"{pods}/warm-standby-1"),
             what="the policy to be in force", timeout=60)
    killed_at = warm.status()["latestCheckpoint"]["id"]
    assert process_node.kill_pod_process(namespace=kube_namespace, name="warm-attempt-1") > 0
    wait_for(lambda: any("promotions are refused" in str(e.get("message"))
                         for e in warm.events()),
             what="the relabel of the promoted standby to be refused", timeout=120)
    kube_rest.request("DELETE", binding)
    kube_rest.request("DELETE", policy)
    second = warm.until(lambda s: s.get("attempt") == 2 and s.get("phase") == "Running"
                        and "restoredFrom" in s,
                        what="the standby to run attempt 2 and report its restore",
                        timeout=120)
    assert second["driverPod"] == "warm-standby-1"
    assert second["restoredFrom"]["id"] >= killed_at
    assert second["restarts"] == 1
    assert "warm-attempt-2" not in warm.pod_names()
    promoted = kube_rest.get(f"{pods}/warm-standby-1")["metadata"]["labels"]
    assert (promoted["checkpointed.io/role"], promoted["checkpointed.io/attempt"]) \
        == ("driver", "2")
    store = warm.configmap()["metadata"]["annotations"]  # type: ignore[index]
    assert store["checkpointed.io/fence-attempt"] == "2"
    assert json.loads(store["checkpointed.io/standby-promotion"])["pod"] == "warm-standby-1"
    assert any("promoted standby driver warm-standby-1" in str(e.get("message"))
               for e in warm.events())
    # A new standby waits beside the promoted driver.
    wait_for(lambda: "warm-standby-2" in warm.pod_names(), what="a new standby",
             timeout=60)

    done = warm.until(lambda s: s.get("phase") in ("Succeeded", "Failed"),
                      what="the job to finish", timeout=300)
    assert done["phase"] == "Succeeded", done
    assert done["attempt"] == 2
    problems = verify(read_output(tmp_path / "output"), count=count)
    assert problems == [], problems[:5]
    # A finished job keeps no standby.
    wait_for(lambda: not any("standby" in name and _is_live(kube_rest, pods, name)
                             for name in warm.pod_names()),
             what="the standby to be stopped once the job finished", timeout=120)


def _is_live(kube_rest: Any, pods: str, name: str) -> bool:
    try:
        pod = kube_rest.get(f"{pods}/{name}")
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return pod.get("status", {}).get("phase") in ("Pending", "Running") \
        and not pod["metadata"].get("deletionTimestamp")


def test_a_recreated_job_never_adopts_its_orphaned_store_and_continues_it_only_when_told(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, process_node: Any,
    cjob_operator: OperatorProcess, tmp_path: Path,
) -> None:
    count = 6_000
    job = running_sum_job(name="again", namespace=kube_namespace, work_dir=tmp_path,
                          count=count, rate=400, cleanup="Retain")
    assert kubectl.apply(job).returncode == 0
    again = watcher(kube_rest, kube_namespace, "again", cjob_operator)
    again.until(lambda s: s.get("latestCheckpoint", {}).get("id", 0) >= 2,
                what="the first job to complete two checkpoints", timeout=180)
    first_uid = again.get()["metadata"]["uid"]  # type: ignore[index]

    # An orphaning delete leaves the store, without its owner, holding the pointers.
    assert kubectl.run("-n", kube_namespace, "delete", "checkpointedjob", "again",
                       "--cascade=orphan", "--wait=true", "--timeout=90s").returncode == 0
    orphaned = wait_for(
        lambda: (lambda cm: cm if cm and not cm["metadata"].get("ownerReferences") else None)(
            again.configmap()),
        what="the garbage collector to orphan the store", timeout=60)
    fence = orphaned["metadata"]["annotations"]["checkpointed.io/fence-attempt"]
    pointers = sorted(k for k in orphaned["data"] if k.startswith("checkpointID-"))
    assert pointers, orphaned
    latest_path = json.loads(orphaned["data"][pointers[-1]])["path"]
    assert f"again-{first_uid}/" in latest_path

    # The same name again: the store is not adopted, fenced or restored from.
    assert kubectl.apply(job).returncode == 0
    conflict = again.until(lambda s: s.get("reason") == "StoreConflict",
                           what="StoreConflict", timeout=60)
    assert conflict["phase"] == "Failed"
    assert "latestCheckpoint" not in conflict, "another job's checkpoint is not this job's"
    assert latest_path in conflict["message"]
    assert "StoreConflict" in again.event_reasons()
    assert "again-attempt-1" not in again.pod_names()
    kept = again.configmap()
    assert kept is not None
    assert kept["metadata"]["annotations"]["checkpointed.io/fence-attempt"] == fence

    # Naming the checkpoint with the opt-in, then deleting the ConfigMap, continues the
    # first job. In this order: once the ConfigMap is gone the job starts at its next
    # look, from whatever spec.restore says then.
    kubectl.patch_job(kube_namespace, "again", {"spec": {"restore": {
        "from": latest_path, "allowForeignJob": True}}})
    still = again.until(lambda s: s.get("reason") == "StoreConflict", what="still StoreConflict")
    assert still["phase"] == "Failed", "the opt-in alone does not adopt the store"
    kube_rest.request(
        "DELETE", f"/api/v1/namespaces/{quote(kube_namespace)}/configmaps/again-checkpoints")
    done = again.until(lambda s: s.get("phase") in ("Succeeded", "Failed")
                       and s.get("reason") != "StoreConflict",
                       what="the recreated job to finish", timeout=300)
    assert done["phase"] == "Succeeded", done
    assert done["restoredFrom"]["path"] == latest_path
    assert done["latestCheckpoint"]["id"] > done["restoredFrom"]["id"]
    problems = verify(read_output(tmp_path / "output"), count=count)
    assert problems == [], problems[:5]


def test_a_missing_entrypoint_fails_the_job_once_with_its_reason(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, process_node: Any,
    cjob_operator: OperatorProcess, tmp_path: Path,
) -> None:
    job = running_sum_job(name="broken", namespace=kube_namespace, work_dir=tmp_path,
                          count=100, rate=100, entrypoint="no_such_module:build")
    assert kubectl.apply(job).returncode == 0
    broken = watcher(kube_rest, kube_namespace, "broken", cjob_operator)
    failed = broken.until(lambda s: s.get("phase") == "Failed", what="Failed", timeout=180)
    assert failed["reason"] in ("UserCodeError", "InvalidConfiguration"), failed
    assert failed["lastFailure"]["exitCode"] in (2, 3)
    assert failed["restarts"] == 0 and failed["attempt"] == 1
    conditions = {c["type"]: c for c in failed["conditions"]}
    assert conditions["Failed"]["status"] == "True"
    assert conditions["Ready"]["status"] == "False"
    assert broken.pod_names() == ["broken-attempt-1"], "no restart loop"
    assert failed["reason"] in broken.event_reasons()
    # file:// checkpoints with no volume mounted: lost with the pod, and said so.
    assert "CheckpointsNotPersistent" in broken.event_reasons()


def test_pod_settings_reach_the_driver_pod_and_checkpoints_on_a_volume_raise_no_warning(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, process_node: Any,
    cjob_operator: OperatorProcess, tmp_path: Path,
) -> None:
    checkpoints = tmp_path / "checkpoints"
    job = running_sum_job(name="placed", namespace=kube_namespace, work_dir=tmp_path,
                          count=400, rate=100, storage=checkpoints.as_uri())
    toleration = {"key": "dedicated", "operator": "Equal", "value": "spark",
                  "effect": "NoSchedule"}
    job["spec"]["pod"] = {
        "volumes": [{"name": "checkpoints",
                     "hostPath": {"path": str(checkpoints), "type": "DirectoryOrCreate"}}],
        "volumeMounts": [{"name": "checkpoints", "mountPath": str(checkpoints)}],
        "nodeSelector": {"kubernetes.io/hostname": process_node.name},
        "tolerations": [toleration],
    }
    assert kubectl.apply(job).returncode == 0
    placed = watcher(kube_rest, kube_namespace, "placed", cjob_operator)
    placed.until(lambda s: s.get("phase") == "Running", what="Running", timeout=120)
    pod = kube_rest.request(
        "GET", f"/api/v1/namespaces/{quote(kube_namespace)}/pods/placed-attempt-1")
    spec = pod["spec"]
    assert spec["nodeName"] == process_node.name
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": process_node.name}
    assert toleration in spec["tolerations"]
    volume = next(v for v in spec["volumes"] if v["name"] == "checkpoints")
    assert volume["hostPath"]["path"] == str(checkpoints)
    mounts = spec["containers"][0]["volumeMounts"]
    assert {"name": "checkpoints", "mountPath": str(checkpoints)}.items() <= next(
        m for m in mounts if m["name"] == "checkpoints").items()
    placed.until(lambda s: s.get("phase") == "Succeeded", what="Succeeded", timeout=240)
    assert "CheckpointsNotPersistent" not in placed.event_reasons()


def test_deleting_a_job_with_cleanup_delete_removes_its_s3_checkpoints(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, cjob_operator: OperatorProcess,
    s3_bucket: Any, tmp_path: Path,
) -> None:
    kube_rest.request("POST", f"/api/v1/namespaces/{quote(kube_namespace)}/secrets", body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds"},
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in (
            ("AWS_ACCESS_KEY_ID", s3_bucket.s3_config.access_key_id),
            ("AWS_SECRET_ACCESS_KEY", s3_bucket.s3_config.secret_access_key))},
    })
    job = running_sum_job(
        name="s3job", namespace=kube_namespace, work_dir=tmp_path, count=100, rate=100,
        storage=f"s3://{s3_bucket.bucket}/ckpt",
        s3={"endpoint": s3_bucket.endpoint_url, "region": "us-east-1",
            "credentialsSecret": "s3-creds"},
    )
    job["spec"]["suspend"] = True  # created suspended: no driver, only the cleanup path
    assert kubectl.apply(job).returncode == 0
    s3job = watcher(kube_rest, kube_namespace, "s3job", cjob_operator)
    s3job.until(lambda s: s.get("phase") == "Suspended", what="Suspended", timeout=60)
    uid = s3job.get()["metadata"]["uid"]  # type: ignore[index]
    keys = [f"ckpt/s3job-{uid}/chk-1/_metadata", f"ckpt/s3job-{uid}/chk-1/op/0",
            "ckpt/other-job/chk-1/_metadata"]
    for key in keys:
        s3_bucket.client.put_object(Bucket=s3_bucket.bucket, Key=key, Body=b"x")
    assert kubectl.run("-n", kube_namespace, "delete", "checkpointedjob", "s3job",
                       "--wait=true", "--timeout=60s").returncode == 0
    listed = s3_bucket.client.list_objects_v2(Bucket=s3_bucket.bucket).get("Contents", [])
    assert sorted(item["Key"] for item in listed) == ["ckpt/other-job/chk-1/_metadata"]
    (deleted,) = [e for e in s3job.events() if e["reason"] == "CheckpointsDeleted"]
    assert f"s3job-{uid}" in deleted["message"] and "s3job-cleanup" in deleted["message"]


def test_a_cleanup_pod_the_storage_refuses_keeps_the_data_says_why_and_lets_the_job_go(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, cjob_operator: OperatorProcess,
    s3_faults: Any, tmp_path: Path,
) -> None:
    job = running_sum_job(
        name="refused", namespace=kube_namespace, work_dir=tmp_path, count=100, rate=100,
        storage=f"s3://{s3_faults.bucket.bucket}/ckpt",
        s3={"endpoint": s3_faults.endpoint_url, "region": "us-east-1"},
    )
    job["spec"]["suspend"] = True
    assert kubectl.apply(job).returncode == 0
    refused = watcher(kube_rest, kube_namespace, "refused", cjob_operator)
    refused.until(lambda s: s.get("phase") == "Suspended", what="Suspended", timeout=60)
    uid = refused.get()["metadata"]["uid"]  # type: ignore[index]
    key = f"ckpt/refused-{uid}/chk-1/_metadata"
    s3_faults.bucket.client.put_object(Bucket=s3_faults.bucket.bucket, Key=key, Body=b"x")
    s3_faults.proxy.fail_with(403, "AccessDenied")
    assert kubectl.run("-n", kube_namespace, "delete", "checkpointedjob", "refused",
                       "--wait=true", "--timeout=60s").returncode == 0
    (retained,) = [e for e in refused.events() if e["reason"] == "CheckpointsRetained"]
    assert retained["type"] == "Warning"
    assert f"s3://{s3_faults.bucket.bucket}/ckpt/refused-{uid}" in retained["message"]
    assert "exit code 7" in retained["message"], retained["message"]
    assert "checkpoint data kept" in retained["message"], retained["message"]
    s3_faults.proxy.pass_through()
    listed = s3_faults.bucket.client.list_objects_v2(Bucket=s3_faults.bucket.bucket)
    assert [item["Key"] for item in listed.get("Contents", [])] == [key]


def test_a_driver_pod_the_namespace_quota_refuses_is_reported_as_a_warning(
    kube_rest: Any, kube_namespace: str, cjob_operator: OperatorProcess
) -> None:
    """A pod the operator cannot create (a quota) is reported as a Warning, not a crash loop."""
    kube_rest.request("POST", f"/api/v1/namespaces/{quote(kube_namespace)}/resourcequotas",
                      body={"apiVersion": "v1", "kind": "ResourceQuota",
                            "metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}})
    path = f"/apis/checkpointed.io/v1alpha1/namespaces/{quote(kube_namespace)}/checkpointedjobs"
    job = running_sum_job(name="quota", namespace=kube_namespace, work_dir=Path("/nonexistent"),
                          count=10, rate=10)
    try:
        kube_rest.request("POST", path, body=job)
    except ApiError as exc:  # pragma: no cover - the CRD accepts this job
        raise AssertionError(exc.message) from None
    quota = watcher(kube_rest, kube_namespace, "quota", cjob_operator)
    wait_for(lambda: "ReconcileError" in quota.event_reasons(),
             what="a ReconcileError event", timeout=60)
    warning = next(e for e in quota.events() if e["reason"] == "ReconcileError")
    assert "forbidden" in warning["message"].lower() or "quota" in warning["message"].lower()
    assert warning["type"] == "Warning"
    assert quota.pod_names() == []
    status = quota.until(lambda s: s.get("reason") == "DriverCreateFailed",
                         what="the refusal in the status", timeout=30)
    assert "quota" in status["message"].lower() or "forbidden" in status["message"].lower()
    assert status["phase"] == "Pending"


def test_two_peering_replicas_run_one_at_a_time_and_the_standby_takes_over(
    control_plane: Any, kubectl: Kubectl, kube_rest: Any, kube_namespace: str,
    cjob_crd: None, tmp_path: Path,
) -> None:
    install_kopf_peering(kube_rest, namespace=kube_namespace, name="cjob")
    replicas = [
        OperatorProcess(namespace=kube_namespace, kubeconfig=control_plane.kubeconfig,
                        log_file=tmp_path / f"operator-{priority}.log",
                        mode=("--peering", "cjob", "--priority", str(priority)))
        for priority in (200, 100)
    ]
    active, standby = replicas
    try:
        active.start()
        wait_for(lambda: "Resuming operations" in active.log_tail(400),
                 what="the first replica to become active", timeout=60)
        standby.start()
        wait_for(lambda: "Keep-alive in 'cjob'" in standby.log_tail(400),
                 what="the second replica to join the peering", timeout=60)

        first = running_sum_job(name="first", namespace=kube_namespace, work_dir=tmp_path,
                                count=10, rate=10)
        first["spec"]["suspend"] = True
        assert kubectl.apply(first).returncode == 0
        watcher(kube_rest, kube_namespace, "first", active).until(
            lambda s: s.get("phase") == "Suspended", what="Suspended", timeout=60)
        standby_log = standby.log_tail(2000)
        assert "Resuming operations" not in standby_log, "both replicas were active"
        assert "Handler 'job_changed'" not in standby_log, "the standby handled a job"

        active.stop()
        wait_for(lambda: "Resuming operations" in standby.log_tail(400),
                 what="the standby to take over", timeout=90)
        second = running_sum_job(name="second", namespace=kube_namespace, work_dir=tmp_path,
                                 count=10, rate=10)
        second["spec"]["suspend"] = True
        assert kubectl.apply(second).returncode == 0
        watcher(kube_rest, kube_namespace, "second", standby).until(
            lambda s: s.get("phase") == "Suspended", what="Suspended by the standby",
            timeout=60)
        for name in ("first", "second"):
            assert kubectl.run("-n", kube_namespace, "delete", "checkpointedjob", name,
                               "--wait=true", "--timeout=60s").returncode == 0
    finally:
        for replica in replicas:
            replica.stop()
