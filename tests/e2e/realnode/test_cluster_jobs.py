"""CheckpointedJobs on a real node, as a user meets them: the chart's operator from
its image, drivers and Spark executors as containers of the runtime image, job code
from a ConfigMap, checkpoints and output on an S3 server in the cluster or on a
PersistentVolumeClaim; pods killed mid-run; output checked exactly-once."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import cluster_scenarios
from e2e.cluster_scenarios import COUNT, RATE, apply_s3_job, finished
from e2e.controlplane.rest import quote
from e2e.controlplane.waiting import pod_is_ready
from e2e.jobs import RUNNING_SUM_DIR
from e2e.kind.chart import ChartRelease, HelmCommandError
from e2e.realnode import running_sum, scenario
from e2e.realnode.cluster_s3 import ClusterS3
from e2e.realnode.pytest_plugin import RealCluster

pytestmark = [
    # The session fixture may import images and start the node inside the first test.
    pytest.mark.timeout(1800),
]

sys.path.insert(0, str(RUNNING_SUM_DIR))
from verify import verify  # noqa: E402

TRICKY_OUTPUT = "output-$$5-$(POD_NAME)"
"""An output prefix the kubelet would rewrite in an argument (the driver has POD_NAME)."""
TRICKY_CHECKPOINTS = "checkpoints-$$-$(POD_NAME)"


def _impostor_standby(job: scenario.JobHandle, *, image: str) -> dict[str, Any]:
    """A pod with the labels of the job's standby, the spec hash of its driver and a
    readiness that passes at once, but created by a test, not for the job."""
    driver = job.pod(f"{job.name}-attempt-1") or {}
    spec_hash = driver["metadata"]["annotations"]["checkpointed.io/spec-hash"]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": f"{job.name}-standby-9",
            "labels": {"checkpointed.io/job": job.name, "checkpointed.io/role": "standby",
                       "checkpointed.io/attempt": "1"},
            "annotations": {"checkpointed.io/spec-hash": spec_hash},
        },
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "driver", "image": image, "imagePullPolicy": "Never",
                "command": ["sleep", "3600"],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
            "terminationGracePeriodSeconds": 1,
        },
    }


def _neighbour(kubectl: scenario.Kubectl, namespace: str) -> str:
    """Another job's driver ServiceAccount, with the right to create pods (Spark's
    drivers create their executors): what a hostile job's code runs as."""
    kubectl("create", "serviceaccount", "neighbour-driver", "--namespace", namespace)
    kubectl("create", "role", "neighbour-pods", "--namespace", namespace, "--verb=create,get",
            "--resource=pods")  # fmt: skip
    kubectl("create", "rolebinding", "neighbour-pods", "--namespace", namespace,
            "--role=neighbour-pods", f"--serviceaccount={namespace}:neighbour-driver")
    return f"system:serviceaccount:{namespace}:neighbour-driver"


def _operator_account(kubectl: scenario.Kubectl, operator: ChartRelease) -> str:
    name = kubectl("get", "deployment", "--namespace", operator.namespace, "-o",
                   "jsonpath={.items[0].spec.template.spec.serviceAccountName}").strip()
    return f"system:serviceaccount:{operator.namespace}:{name}"


def _create_pod_as(kubectl: scenario.Kubectl, *, namespace: str, pod: dict[str, Any],
                   user: str) -> str:
    """Create ``pod`` as ``user``: "" when created, else the API server's refusal."""
    try:
        kubectl("create", "--namespace", namespace, "-f", "-", f"--as={user}",
                "--as-group=system:serviceaccounts", "--as-group=system:authenticated",
                stdin=yaml.safe_dump(pod))
    except HelmCommandError as exc:  # kubectl's error, with the server's message
        return str(exc)
    return ""


def test_a_k8s_job_survives_an_executor_kill_and_a_driver_kill_with_exactly_once_output(
    real_cluster: RealCluster,
    restricted_namespace: str,
    operator: ChartRelease,
    cluster_s3: ClusterS3,
    kubectl: scenario.Kubectl,
    record_property: Any,
) -> None:
    cluster_scenarios.executor_and_driver_kills(
        cluster=real_cluster, namespace=restricted_namespace, s3=cluster_s3, kubectl=kubectl,
        record_property=record_property,
    )  # fmt: skip


def test_a_k8s_job_with_a_warm_standby_recovers_from_a_driver_kill_by_promoting_it(
    real_cluster: RealCluster,
    restricted_namespace: str,
    operator: ChartRelease,
    cluster_s3: ClusterS3,
    kubectl: scenario.Kubectl,
    record_property: Any,
) -> None:
    rest = real_cluster.rest()
    created_at = time.time()  # the node's containers share this machine's clock
    # The output path holds what the kubelet rewrites in container arguments ("$$",
    # "$(POD_NAME)"): both drivers must write under it as written, not under their
    # own pod names.
    job, bucket = apply_s3_job(rest=rest, kubectl=kubectl, s3=cluster_s3,
                                namespace=restricted_namespace, name="warm", master="k8s",
                                standby=True, output=TRICKY_OUTPUT)  # fmt: skip

    scenario.wait_until(lambda: scenario.records_flowing(job.pod("warm-attempt-1")),
                        what="the first records",
                        timeout=300, detail=job.describe)  # fmt: skip
    # Times as the drivers took them (their milestones), not as polls saw them.
    cold_start = scenario.driver_milestones(job.pod("warm-attempt-1"))["first_record"] - created_at

    # The standby: its own Spark and executors, Ready once its readiness probe found
    # the runtime's readiness file (the kubelet runs the probe in the container).
    scenario.wait_until(lambda: pod_is_ready(job.pod("warm-standby-1")),
                        what="the standby to be Ready", timeout=300,
                        detail=job.describe)  # fmt: skip
    scenario.wait_until(lambda: len(job.running_executors()) == 4,
                        what="two executors for each driver", timeout=240,
                        detail=job.describe)  # fmt: skip
    checkpoint_before_kill = scenario.wait_until(
        lambda: job.latest_checkpoint_id() or None, what="a checkpoint", timeout=60)
    # The standby holds a connection to the active driver's beacon, at its pod address.
    scenario.wait_until(lambda: "watching the driver of attempt 1" in job.logs("warm-standby-1"),
                        what="the standby to watch the active driver", timeout=60,
                        detail=job.describe)  # fmt: skip

    # Pods posing as the job's standby. A neighbour's ServiceAccount that may create
    # pods is refused by the chart's admission policy; one the policy lets through
    # (created with the operator's own identity, as nobody else can) but not owned by
    # the job is ignored by the operator, which says so.
    impostor = _impostor_standby(job, image=real_cluster.runtime_image)
    refused = _create_pod_as(kubectl, namespace=restricted_namespace, pod=impostor,
                             user=_neighbour(kubectl, restricted_namespace))
    assert "only the checkpointed-jobs operator" in refused, refused
    operator_account = _operator_account(kubectl, operator)
    assert _create_pod_as(kubectl, namespace=restricted_namespace, pod=impostor,
                          user=operator_account) == ""
    scenario.wait_until(lambda: any(e.startswith("ForeignPodIgnored: pod warm-standby-9 ")
                                    for e in job.events()),
                        what="the operator to report the pod it ignores", timeout=60,
                        detail=job.describe)  # fmt: skip
    scenario.wait_until(lambda: pod_is_ready(job.pod("warm-standby-9")),
                        what="the impostor to be Ready", timeout=120,
                        detail=job.describe)  # fmt: skip

    killed_at = time.time()
    real_cluster.kill_container(job.driver() or {})
    scenario.wait_until(lambda: job.status().get("driverPod") == "warm-standby-1",
                        what="the standby to be promoted", timeout=120,
                        detail=job.describe)  # fmt: skip
    scenario.wait_until(lambda: scenario.records_flowing(job.pod("warm-standby-1")),
                        what="records flowing in the promoted standby", timeout=240,
                        detail=job.describe)  # fmt: skip
    seen_after = time.time() - killed_at  # as a poll of the record counter sees it

    def takeover_milestones() -> dict[str, float] | None:
        milestones = scenario.driver_milestones(job.pod("warm-standby-1"))
        return milestones if "first_record" in milestones else None

    milestones = scenario.wait_until(takeover_milestones,
                                     what="the promoted standby's first-record milestone",
                                     timeout=60, detail=job.describe)  # fmt: skip
    assert milestones["first_record"] > milestones["promoted"] > killed_at
    promoted_after = milestones["promoted"] - killed_at  # detection and the operator's pass
    takeover = milestones["first_record"] - killed_at
    record_property("standby_driver_kill_to_first_record_s", round(takeover, 2))
    record_property("standby_driver_kill_to_promotion_s", round(promoted_after, 2))
    record_property("standby_driver_kill_to_records_seen_s", round(seen_after, 2))
    assert job.pod("warm-attempt-2") is None, "the standby was promoted: no new driver pod"
    planted = job.pod("warm-standby-9") or {}
    assert planted["metadata"]["labels"]["checkpointed.io/role"] == "standby", "never promoted"
    assert "deletionTimestamp" not in planted["metadata"], "not the operator's to delete"
    promoted = job.pod("warm-standby-1") or {}
    assert promoted["metadata"]["labels"]["checkpointed.io/role"] == "driver"
    assert promoted["metadata"]["labels"]["checkpointed.io/attempt"] == "2"

    done = finished(job)
    assert done["phase"] == "Succeeded", job.describe()
    assert done["restarts"] == 1
    # The standby saw its connection to the driver close without a goodbye and said so.
    # Which report the operator acted on first (the standby's or the kubelet's) is a
    # race; the standby's usually wins by about a second, and is recorded.
    assert "is gone: its connection" in job.logs("warm-standby-1")
    record_property("standby_takeover_reported_by", done["lastFailure"]["reason"])
    # Whichever report won, the status says what ended the driver: its exit code.
    assert done["lastFailure"]["exitCode"] == 137, done["lastFailure"]
    restored = scenario.restored_id_from_logs(job.logs("warm-standby-1"))
    assert restored is not None and restored >= checkpoint_before_kill
    assert done["restoredFrom"]["id"] == restored
    client = cluster_s3.client()
    assert {key.split("/")[0] for key in scenario.list_keys(client, bucket=bucket,
                                                              prefix="output")} == {TRICKY_OUTPUT}
    records = scenario.read_jsonl_objects(client, bucket=bucket, prefix=f"{TRICKY_OUTPUT}/")
    assert verify(records, count=COUNT) == []
    print(f"cold start -> first record {cold_start:.1f}s; driver kill -> first record in "
          f"the promoted standby {takeover:.2f}s ({takeover / cold_start:.2f}x; promoted "
          f"after {promoted_after:.2f}s on {done['lastFailure']['reason']}; records seen in "
          f"its counter after {seen_after:.1f}s)")


def test_file_checkpoints_on_a_claim_survive_a_driver_kill(
    real_cluster: RealCluster,
    real_namespace: str,
    operator: ChartRelease,
    kubectl: scenario.Kubectl,
    tmp_path: Path,
) -> None:
    rest = real_cluster.rest()
    data = tmp_path / "volume"
    data.mkdir()
    data.chmod(0o777)
    pv = f"{real_namespace}-data"
    rest.request("POST", "/api/v1/persistentvolumes", body={
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                 "hostPath": {"path": str(data)},
                 "claimRef": {"namespace": real_namespace, "name": "data"}},
    })  # fmt: skip
    try:
        kubectl("apply", "--namespace", real_namespace, "-f", "-", stdin=yaml.safe_dump({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv,
                     "resources": {"requests": {"storage": "1Gi"}}},
        }))  # fmt: skip
        running_sum.code_configmap(kubectl, real_namespace)
        manifest = running_sum.manifest(
            name="local-sum",
            storage="file:///data/checkpoints",
            output="/data/output",
            master="local[2]",
            s3=None,
            count=COUNT,
            rate=RATE,
            pod={
                "volumes": [
                    running_sum.CODE_VOLUME,
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                ],
                "volumeMounts": [running_sum.CODE_MOUNT, {"name": "data", "mountPath": "/data"}],
            },
        )
        kubectl("apply", "--namespace", real_namespace, "-f", "-", stdin=yaml.safe_dump(manifest))
        job = scenario.JobHandle(rest=rest, namespace=real_namespace, name="local-sum")
        scenario.wait_until(lambda: job.latest_checkpoint_id() >= 2, what="checkpoint 2",
                            timeout=240, detail=job.describe)  # fmt: skip
        first = job.status()["driverPod"]
        real_cluster.kill_container(job.driver() or {})
        done = finished(job)
        assert done["phase"] == "Succeeded", job.describe()
        assert done["restarts"] == 1 and done["driverPod"] != first
        restored = scenario.restored_id_from_logs(job.logs(done["driverPod"]))
        assert restored is not None and done["restoredFrom"]["id"] == restored
        # Checkpoints and output were on the claim, not in a container's filesystem.
        assert any((data / "checkpoints").rglob("_metadata"))
        from verify import read_output

        assert verify(read_output(data / "output"), count=COUNT) == []
    finally:
        rest.request("DELETE", f"/api/v1/persistentvolumes/{quote(pv)}")


def test_deleting_a_running_job_with_cleanup_policy_delete_removes_every_root_and_upload(
    real_cluster: RealCluster,
    real_namespace: str,
    operator: ChartRelease,
    cluster_s3: ClusterS3,
    kubectl: scenario.Kubectl,
) -> None:
    """Deleted while it runs, with executors still checkpointing RocksDB state to S3,
    after its storage moved once: nothing of it is left under either root, no upload
    is left unfinished, and the store goes last."""
    rest = real_cluster.rest()
    client = cluster_s3.client()
    # A storage path the kubelet would rewrite: the driver must write, and the cleanup
    # pod delete, the one root the user wrote.
    job, bucket = apply_s3_job(rest=rest, kubectl=kubectl, s3=cluster_s3,
                                namespace=real_namespace, name="doomed", master="k8s",
                                cleanup="Delete", checkpoints=TRICKY_CHECKPOINTS,
                                rocksdb=True)  # fmt: skip
    scenario.wait_until(lambda: job.latest_checkpoint_id() >= 1, what="a checkpoint",
                        timeout=240, detail=job.describe)  # fmt: skip
    written = scenario.list_keys(client, bucket=bucket, prefix="checkpoints")
    assert written and {key.split("/")[0] for key in written} == {TRICKY_CHECKPOINTS}
    # The storage moves: the next attempt restores from the old root, writes to the new.
    kubectl("patch", "checkpointedjob", "doomed", "--namespace", real_namespace,
            "--type=merge", "-p",
            json.dumps({"spec": {"checkpoint": {"storage": f"s3://{bucket}/moved"}}}))
    scenario.wait_until(
        lambda: str((job.status().get("latestCheckpoint") or {}).get("path", "")).startswith(
            f"s3://{bucket}/moved/"),
        what="a checkpoint under the moved storage", timeout=240, detail=job.describe)
    assert len(job.status().get("storageRoots") or []) == 2, job.status()
    # An upload its writer never finished (a killed executor's, until aborted: billed,
    # and invisible to a listing).
    uid = (rest.get(f"/apis/checkpointed.io/v1alpha1/namespaces/{quote(real_namespace)}"
                    f"/checkpointedjobs/doomed"))["metadata"]["uid"]
    client.create_multipart_upload(Bucket=bucket, Key=f"moved/doomed-{uid}/chk-999/op/0")
    assert job.pods("executor"), "deleted while its executors run"
    store = f"/api/v1/namespaces/{quote(real_namespace)}/configmaps/doomed-checkpoints"
    assert rest.get(store)

    kubectl("delete", "--namespace", real_namespace, "checkpointedjob", "doomed", "--wait=true",
            timeout=180)  # fmt: skip

    def store_gone() -> bool:
        try:
            rest.get(store)
        except Exception:
            return True
        return False

    scenario.wait_until(store_gone, what="the checkpoint ConfigMap deleted", timeout=120)
    assert not job.pods("executor")
    for prefix in (TRICKY_CHECKPOINTS, "moved"):
        assert not scenario.list_keys(client, bucket=bucket, prefix=prefix), prefix
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_a_job_whose_checkpoint_store_was_deleted_refuses_to_start_empty_until_told_where_to_resume(
    real_cluster: RealCluster,
    real_namespace: str,
    operator: ChartRelease,
    cluster_s3: ClusterS3,
    kubectl: scenario.Kubectl,
) -> None:
    rest = real_cluster.rest()
    client = cluster_s3.client()
    job, bucket = apply_s3_job(rest=rest, kubectl=kubectl, s3=cluster_s3,
                                namespace=real_namespace, name="orphan", master="local[2]")  # fmt: skip
    scenario.wait_until(lambda: job.latest_checkpoint_id() >= 2, what="checkpoint 2",
                        timeout=240, detail=job.describe)  # fmt: skip

    # The store goes (as if deleted by hand), then the driver dies.
    kubectl("delete", "--namespace", real_namespace, "configmap", "orphan-checkpoints")
    real_cluster.kill_container(job.driver() or {})
    refused = finished(job, timeout=180)
    assert (refused["phase"], refused["reason"]) == ("Failed", "StoreLost"), job.describe()
    lost = refused["latestCheckpoint"]
    assert any(f"checkpoint {lost['id']}" in e for e in job.events() if "StoreLost" in e)

    # Naming the recorded checkpoint resumes the job from it, exactly once.
    kubectl("patch", "--namespace", real_namespace, "checkpointedjob", "orphan", "--type=merge",
            "-p", f'{{"spec": {{"restore": {{"from": "{lost["path"]}"}}}}}}')  # fmt: skip

    def succeeded() -> dict[str, Any] | None:
        status = job.status()
        return status if status.get("phase") == "Succeeded" else None

    done = scenario.wait_until(succeeded, what="the resumed job to succeed", timeout=400,
                               detail=job.describe)  # fmt: skip
    restored = scenario.restored_id_from_logs(job.logs(done["driverPod"]))
    assert restored == lost["id"]
    records = scenario.read_jsonl_objects(client, bucket=bucket, prefix="output/")
    assert verify(records, count=COUNT) == []


def test_a_job_whose_executors_cannot_be_placed_fails_saying_what_is_missing(
    real_cluster: RealCluster,
    real_namespace: str,
    operator: ChartRelease,
    cluster_s3: ClusterS3,
    kubectl: scenario.Kubectl,
) -> None:
    """Executors asking for more CPU than the node has: the barrier stage can never
    start, and the job says so instead of staying Running (or spending its restarts
    on attempts that would wait for the same capacity)."""
    job, _ = apply_s3_job(rest=real_cluster.rest(), kubectl=kubectl, s3=cluster_s3,
                          namespace=real_namespace, name="greedy", master="k8s",
                          executor_request_cores="64", start_timeout="45s")
    scenario.wait_until(lambda: job.status().get("phase") == "Failed",
                        what="the job failed", timeout=300, detail=job.describe)
    status = job.status()
    assert status["reason"] == "ExecutorsUnschedulable", status
    assert status.get("restarts", 0) == 0, status
    message = status["lastFailure"]["message"]
    assert "Insufficient cpu" in message and "spec.spark.executor" in message, message
