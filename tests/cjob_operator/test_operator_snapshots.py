"""The snapshot pass's glue: what it reads, the pod it builds from the job's spec, and
what it refuses to believe (a pod of the right name that is not the snapshot's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cjob_operator.cluster import JobRef, StoreReading
from cjob_operator.config import OperatorConfig
from cjob_operator.snapshot_reconcile import SnapshotReconciler

from cjob_checkpoint.store.configmap_layout import StoreOwner
from cjob_checkpoint.store.holds import CheckpointHold, CheckpointHolds
from cjob_spec.snapshot_outcome import SnapshotOutcome, SnapshotTask
from cjob_spec.status import CheckpointRef

NS = "team"
STORAGE = "s3://bucket/ckpt"
JOB_SPEC = {
    "image": "runtime:1",
    "job": {"entrypoint": "job:build"},
    "parallelism": 1,
    "spark": {"master": "local[1]"},
    "checkpoint": {"storage": STORAGE,
                   "s3": {"endpoint": "http://s3:9000", "credentialsSecret": "creds"}},
}


class FakeCluster:
    def __init__(self) -> None:
        self.snapshot: dict[str, Any] = {
            "apiVersion": "checkpointed.io/v1alpha1", "kind": "CheckpointedJobSnapshot",
            "metadata": {"name": "keep", "namespace": NS, "uid": "s1", "generation": 1},
            "spec": {"jobName": "sums"}}
        self.job: dict[str, Any] = {
            "metadata": {"name": "sums", "uid": "j1"}, "spec": JOB_SPEC,
            "status": {"latestCheckpoint": {"id": 4,
                                            "path": f"{STORAGE}/sums-j1/chk-4/_metadata"}}}
        self.pods: dict[str, Mapping[str, Any]] = {}
        self.events: list[tuple[str, str, str]] = []
        self.retained = (3, 4)
        self.holds = CheckpointHolds()

    def read_store(self, *, namespace: str, name: str) -> StoreReading | None:
        assert name == "sums-checkpoints"
        refs = tuple(CheckpointRef(id=i, path=f"{STORAGE}/sums-j1/chk-{i}/_metadata")
                     for i in self.retained)
        return StoreReading(fence_attempt=1, latest=refs[-1], size_bytes=100,
                            owners=(StoreOwner(name="sums", uid="j1"),), checkpoints=refs,
                            holds=self.holds)

    def hold_checkpoint(self, *, namespace: str, store: str, checkpoint_id: int, holder: str,
                        by: str) -> bool:
        if checkpoint_id not in self.retained:
            return False
        self.holds = self.holds.with_hold(
            CheckpointHold(holder=holder, checkpoint_id=checkpoint_id, by=by))
        return True

    def release_checkpoint(self, *, namespace: str, store: str, holder: str) -> None:
        self.holds = self.holds.without(holder)

    def read_snapshot(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.snapshot

    def write_snapshot_status(self, *, snapshot: Mapping[str, Any],
                              status: Mapping[str, Any]) -> None:
        self.snapshot = {**self.snapshot, "status": dict(status)}

    def read_job(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.job

    def read_pod(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.pods.get(name)

    def create_pod(self, *, manifest: Mapping[str, Any]) -> None:
        self.pods.setdefault(manifest["metadata"]["name"], manifest)

    def delete_pod(self, *, namespace: str, name: str, force: bool) -> None:
        self.pods.pop(name, None)

    def post_event(self, *, job: JobRef, type: str, reason: str, message: str) -> None:
        assert job.kind == "CheckpointedJobSnapshot"
        self.events.append((type, reason, message))


def finish(pod: Mapping[str, Any], outcome: SnapshotOutcome) -> dict[str, Any]:
    return {**pod, "status": {"phase": "Succeeded", "containerStatuses": [{
        "name": "snapshot", "state": {"terminated": {
            "exitCode": 0, "message": outcome.to_message()}}}]}}


def test_the_copy_pod_reaches_storage_as_the_jobs_driver_does_and_its_outcome_completes() -> None:
    cluster = FakeCluster()
    reconciler = SnapshotReconciler(cluster=cluster, operator_config=OperatorConfig())
    reconciler.reconcile(namespace=NS, name="keep")
    assert cluster.pods == {}, "nothing is copied before the checkpoint is held"
    assert cluster.holds.held_ids() == {4}
    reconciler.reconcile(namespace=NS, name="keep")
    pod = cluster.pods["keep-take"]
    container = pod["spec"]["containers"][0]
    assert container["image"] == "runtime:1"
    assert container["args"][:3] == ["take-snapshot", "--checkpoint",
                                      f"{STORAGE}/sums-j1/chk-4/_metadata"]
    assert f"{STORAGE}/snapshots/keep-s1" in container["args"]
    secrets = [v["valueFrom"]["secretKeyRef"]["name"] for v in container["env"]
               if "valueFrom" in v]
    assert secrets and set(secrets) == {"creds"}, "credentials as references, never values"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "s1"
    assert "checkpointed.io/job" not in pod["metadata"]["labels"], "not one of the job's pods"
    assert pod["spec"]["automountServiceAccountToken"] is False

    outcome = SnapshotOutcome(task=SnapshotTask.TAKE, checkpoint_id=4, files=3, size_bytes=5,
                              path=f"{STORAGE}/snapshots/keep-s1/sums-j1/chk-4/_metadata")
    cluster.pods["keep-take"] = finish(pod, outcome)
    reconciler.reconcile(namespace=NS, name="keep")
    status = cluster.snapshot["status"]
    assert status["state"] == "Completed" and status["path"] == outcome.path
    assert [reason for _, reason, _ in cluster.events] == ["Copying", "SnapshotCompleted"]
    assert cluster.holds.held_ids() == set(), "let go once copied"


def test_the_checkpoint_copied_is_one_the_store_retains_not_the_one_the_status_names() -> None:
    cluster = FakeCluster()
    cluster.retained = (6, 7)  # the job's status still says 4, pruned since
    reconciler = SnapshotReconciler(cluster=cluster, operator_config=OperatorConfig())
    reconciler.reconcile(namespace=NS, name="keep")
    cluster.retained = (7, 8)  # newer ones completed; the held 7 stays
    reconciler.reconcile(namespace=NS, name="keep")
    args = cluster.pods["keep-take"]["spec"]["containers"][0]["args"]
    assert args[:3] == ["take-snapshot", "--checkpoint", f"{STORAGE}/sums-j1/chk-7/_metadata"]


def test_a_pod_of_the_copys_name_that_the_snapshot_does_not_own_is_never_believed() -> None:
    cluster = FakeCluster()
    forged = SnapshotOutcome(task=SnapshotTask.TAKE, checkpoint_id=4, path="s3://evil/_metadata")
    cluster.pods["keep-take"] = finish({"metadata": {"name": "keep-take", "ownerReferences": []}},
                                       forged)
    reconciler = SnapshotReconciler(cluster=cluster, operator_config=OperatorConfig())
    reconciler.reconcile(namespace=NS, name="keep")
    reconciler.reconcile(namespace=NS, name="keep")
    status = cluster.snapshot["status"]
    assert status["state"] == "Failed"
    assert "is not this snapshot's" in status["message"]
    assert "path" not in status
    reconciler.reconcile(namespace=NS, name="keep")
    assert cluster.holds.held_ids() == set(), "a copy that never started lets go too"


def test_a_snapshot_pod_mounts_only_the_volume_that_holds_file_storage() -> None:
    from cjob_operator.builders.snapshot_pods import build_snapshot_pod

    from cjob_spec.parse import parse_job

    spec = {**JOB_SPEC, "checkpoint": {"storage": "file:///data/ckpt"},
            "pod": {"volumes": [{"name": "code", "configMap": {"name": "sums-code"}},
                                {"name": "data", "persistentVolumeClaim": {"claimName": "c"}}],
                    "volumeMounts": [{"name": "code", "mountPath": "/opt/code"},
                                     {"name": "data", "mountPath": "/data"}]}}
    job = parse_job({"apiVersion": "checkpointed.io/v1alpha1", "kind": "CheckpointedJob",
                     "metadata": {"name": "sums", "namespace": NS, "uid": "j1"}, "spec": spec})
    pod = build_snapshot_pod(job, name="keep-take", snapshot_name="keep", snapshot_uid="s1",
                             task=SnapshotTask.TAKE, target="file:///data/ckpt/snapshots/keep-s1",
                             checkpoint="file:///data/ckpt/sums-j1/chk-4/_metadata",
                             image="runtime:1", operator_config=OperatorConfig())
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["data"]
    assert [m["name"] for m in pod["spec"]["containers"][0]["volumeMounts"]] == ["data"]
    s3_pod = build_snapshot_pod(
        parse_job({"apiVersion": "checkpointed.io/v1alpha1", "kind": "CheckpointedJob",
                   "metadata": {"name": "sums", "namespace": NS, "uid": "j1"},
                   "spec": {**JOB_SPEC, "pod": spec["pod"]}}),
        name="keep-take", snapshot_name="keep", snapshot_uid="s1", task=SnapshotTask.DISPOSE,
        target=f"{STORAGE}/snapshots/keep-s1", checkpoint=None, image="runtime:1",
        operator_config=OperatorConfig())
    assert "volumes" not in s3_pod["spec"], "S3 storage needs no volume"
