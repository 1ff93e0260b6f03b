"""The reconciliation glue: observe -> plan -> execute -> status, against a fake API."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from cjob_operator.cluster import ClusterError
from cjob_operator.metrics import OperatorMetrics
from cjob_operator.observed import foreign_pods, observe_pods
from cjob_operator.reconcile import Reconciler
from fake_cluster import T0, Clock, FakeCluster, job_document
from pod_settings import runtime_settings_of
from prometheus_client import generate_latest


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def metrics() -> OperatorMetrics:
    return OperatorMetrics(clock=lambda: (T0 + timedelta(seconds=100)).timestamp())


def reconciler(cluster: FakeCluster, clock: Clock, metrics: OperatorMetrics | None = None) -> Reconciler:
    return Reconciler(cluster=cluster, clock=clock, metrics=metrics)


def run_pass(subject: Reconciler, cluster: FakeCluster):  # type: ignore[no-untyped-def]
    return subject.reconcile(namespace="team", name="sums", pods=cluster.pod_list())


def metric_text(metrics: OperatorMetrics) -> str:
    return generate_latest(metrics.registry).decode()


# --- starting a job ---------------------------------------------------------------------


def test_a_new_job_gets_its_store_rights_fence_and_first_driver_in_that_order(clock: Clock) -> None:
    cluster = FakeCluster()
    outcome = run_pass(reconciler(cluster, clock), cluster)
    mutations = [c for c in cluster.calls if not c.startswith(("read_", "post_event"))]
    assert mutations == [
        "ensure_checkpoint_configmap(sums-checkpoints)",
        "ensure_object(ServiceAccount)",
        "ensure_object(Role)",
        "ensure_object(RoleBinding)",
        "ensure_object(NetworkPolicy)",
        "advance_fence(1)",
        "create_pod(sums-attempt-1)",
        "write_status",
    ]
    assert cluster.status["phase"] == "Pending"
    assert cluster.status["attempt"] == 1
    assert cluster.status["driverPod"] == "sums-attempt-1"
    assert cluster.status["observedGeneration"] == 1
    assert "Started" in cluster.reasons()
    assert outcome.requeue_after is not None and outcome.error is None


def test_the_driver_pod_runs_the_runtime_against_the_configmap_store(clock: Clock) -> None:
    cluster = FakeCluster()
    run_pass(reconciler(cluster, clock), cluster)
    pod = cluster.pods["sums-attempt-1"]
    settings = runtime_settings_of(pod)
    assert settings.store == "configmap:team/sums-checkpoints"
    assert settings.attempt == 1
    assert settings.restore == "latest"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_a_running_driver_moves_the_job_to_running_and_reports_the_latest_checkpoint(
    clock: Clock,
) -> None:
    cluster = FakeCluster()
    subject = reconciler(cluster, clock)
    run_pass(subject, cluster)
    cluster.set_pod_state("sums-attempt-1", "Running")
    cluster.complete_checkpoint(7, at=T0 + timedelta(seconds=8))
    clock.advance(10)
    run_pass(subject, cluster)
    assert cluster.status["phase"] == "Running"
    assert cluster.status["latestCheckpoint"]["id"] == 7
    assert "Running" in cluster.reasons()


def test_a_pass_with_nothing_new_writes_no_status(clock: Clock) -> None:
    cluster = FakeCluster()
    subject = reconciler(cluster, clock)
    run_pass(subject, cluster)
    cluster.set_pod_state("sums-attempt-1", "Running")
    run_pass(subject, cluster)
    cluster.calls.clear()
    run_pass(subject, cluster)
    assert "write_status" not in cluster.calls
    assert not [c for c in cluster.calls if c.startswith(("create_", "delete_", "ensure_"))]


# --- failures and restarts ----------------------------------------------------------------


def test_a_killed_driver_is_replaced_by_the_next_attempt_restoring_the_latest_checkpoint(
    clock: Clock, metrics: OperatorMetrics
) -> None:
    cluster = FakeCluster()
    subject = reconciler(cluster, clock, metrics)
    run_pass(subject, cluster)
    cluster.set_pod_state("sums-attempt-1", "Running")
    run_pass(subject, cluster)
    cluster.complete_checkpoint(4, at=T0 + timedelta(seconds=6))
    cluster.set_pod_state("sums-attempt-1", "Failed", exit_code=137)
    clock.advance(40)  # past the failure (12:00:30) and its 1 s backoff
    run_pass(subject, cluster)
    assert cluster.status["phase"] == "Pending"
    assert cluster.status["attempt"] == 2
    assert cluster.status["restarts"] == 1
    # Not a prediction: restoredFrom waits for the new driver's own report.
    assert "restoredFrom" not in cluster.status
    assert cluster.status["lastFailure"]["reason"] == "Killed"
    assert cluster.store is not None and cluster.store.fence_attempt == 2
    assert cluster.calls.index("advance_fence(2)") < cluster.calls.index("create_pod(sums-attempt-2)")
    assert {"Killed", "Restarted"} <= set(cluster.reasons())
    text = metric_text(metrics)
    assert 'cjob_operator_restarts_total{reason="Killed"} 1.0' in text
    assert "cjob_operator_restore_total 1.0" in text


def test_a_permanent_failure_fails_the_job_without_another_attempt(clock: Clock) -> None:
    cluster = FakeCluster()
    subject = reconciler(cluster, clock)
    run_pass(subject, cluster)
    cluster.set_pod_state("sums-attempt-1", "Failed", exit_code=3)
    clock.advance(5)
    run_pass(subject, cluster)
    clock.advance(60)
    run_pass(subject, cluster)
    assert cluster.status["phase"] == "Failed"
    assert cluster.status["reason"] == "UserCodeError"
    assert list(cluster.pods) == ["sums-attempt-1"]


def test_a_failing_api_call_stops_the_pass_keeps_the_old_status_and_backs_off(
    clock: Clock, metrics: OperatorMetrics
) -> None:
    cluster = FakeCluster()
    cluster.fail["create_pod"] = ClusterError(operation="create pod", cause="HTTP 500: boom")
    subject = reconciler(cluster, clock, metrics)
    first = run_pass(subject, cluster)
    second = run_pass(subject, cluster)
    assert "write_status" not in cluster.calls
    assert cluster.status == {}
    assert first.error is not None and "boom" in first.error
    assert first.requeue_after is not None and second.requeue_after is not None
    assert second.requeue_after > first.requeue_after
    assert cluster.reasons().count("ReconcileError") == 1, "one Event per distinct error"
    assert 'cjob_operator_reconcile_errors_total{step="CreateDriver"} 2.0' in metric_text(metrics)


def test_a_driver_pod_refused_for_good_counts_as_a_failed_start_under_the_restart_policy(
    clock: Clock,
) -> None:
    cluster = FakeCluster()
    cluster.fail["create_pod"] = ClusterError(
        operation="create pod", cause="HTTP 403: exceeded quota", retryable=False
    )
    subject = reconciler(cluster, clock)
    run_pass(subject, cluster)
    assert cluster.status["phase"] == "Pending"
    assert cluster.status["reason"] == "DriverCreateFailed"
    assert "exceeded quota" in cluster.status["message"]
    clock.advance(31)  # past the grace period for a pod to appear
    run_pass(subject, cluster)
    assert cluster.status["restarts"] == 1
    assert cluster.status["lastFailure"]["reason"] == "DriverPodMissing"


def test_the_attempt_after_a_failed_creation_is_fenced_again_and_created(clock: Clock) -> None:
    cluster = FakeCluster()
    cluster.fail["create_pod"] = ClusterError(operation="create pod", cause="HTTP 500: boom")
    subject = reconciler(cluster, clock)
    run_pass(subject, cluster)
    del cluster.fail["create_pod"]
    run_pass(subject, cluster)
    attempt = cluster.status["attempt"]
    assert cluster.store is not None and cluster.store.fence_attempt == attempt
    assert list(cluster.pods) == [f"sums-attempt-{attempt}"]


def test_an_event_that_cannot_be_posted_does_not_stop_the_job(clock: Clock) -> None:
    cluster = FakeCluster()
    cluster.fail["post_event"] = ClusterError(operation="post event", cause="HTTP 403: no")
    run_pass(reconciler(cluster, clock), cluster)
    assert "sums-attempt-1" in cluster.pods
    assert cluster.status["phase"] == "Pending"


def test_a_status_changed_by_someone_else_makes_the_pass_plan_again_soon(clock: Clock) -> None:
    cluster = FakeCluster()
    cluster.conflict_status_once = True
    outcome = run_pass(reconciler(cluster, clock), cluster)
    assert outcome.requeue_after is not None and outcome.requeue_after < 1
    assert "ReconcileError" not in cluster.reasons()


# --- spec problems, manual checkpoints, deletion ------------------------------------------


def test_a_spec_the_operator_cannot_run_fails_the_job_with_the_reason(clock: Clock) -> None:
    cluster = FakeCluster(job=job_document(parallelism=0))
    run_pass(reconciler(cluster, clock), cluster)
    assert cluster.status["phase"] == "Failed"
    assert cluster.status["reason"] == "InvalidSpec"
    assert "parallelism" in cluster.status["message"]
    assert cluster.pods == {}
    assert "InvalidSpec" in cluster.reasons()


def test_a_new_trigger_nonce_asks_the_running_driver_for_a_checkpoint_once(clock: Clock) -> None:
    cluster = FakeCluster()
    subject = reconciler(cluster, clock)
    run_pass(subject, cluster)
    cluster.set_pod_state("sums-attempt-1", "Running")
    run_pass(subject, cluster)
    assert cluster.job is not None
    cluster.job["spec"]["checkpoint"]["triggerNonce"] = "backup-1"
    run_pass(subject, cluster)
    run_pass(subject, cluster)
    requests = [c for c in cluster.calls if c.startswith("request_checkpoint")]
    assert requests == ["request_checkpoint(sums-checkpoints, backup-1)"]
    assert cluster.status["lastTriggerNonce"] == "backup-1"


def test_deleting_with_cleanup_delete_waits_for_the_driver_then_its_cleanup_pod(
    clock: Clock,
) -> None:
    cluster = FakeCluster(job=job_document(cleanupPolicy={"checkpoints": "Delete"}))
    subject = reconciler(cluster, clock)
    run_pass(subject, cluster)
    cluster.set_pod_state("sums-attempt-1", "Running")
    run_pass(subject, cluster)
    assert cluster.job is not None
    cluster.job["metadata"]["deletionTimestamp"] = "2024-05-01T12:01:00Z"
    waiting = run_pass(subject, cluster)
    assert not waiting.finalized and waiting.requeue_after is not None
    assert "delete_pod(sums-attempt-1)" in cluster.calls
    assert "sums-cleanup" not in cluster.pods, "no cleanup while a driver may still write"
    cluster.set_pod_state("sums-attempt-1", "Failed", exit_code=143)
    cleaning = run_pass(subject, cluster)
    assert not cleaning.finalized and cleaning.requeue_after is not None
    args = cluster.pods["sums-cleanup"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["--uri", "file:///ckpt/sums-uid-1"]
    assert cluster.store is not None, "the pointers stay until the data is gone"
    cluster.set_pod_state("sums-cleanup", "Succeeded", exit_code=0,
                          message="deleted 3 files under file:///ckpt/sums-uid-1")
    done = run_pass(subject, cluster)
    assert done.finalized
    assert cluster.store is None, "the checkpoint ConfigMap is deleted too"
    (deleted,) = [e for e in cluster.events if e.reason == "CheckpointsDeleted"]
    assert "deleted 3 files" in deleted.message


def test_deleting_with_cleanup_retain_keeps_the_checkpoint_data(clock: Clock) -> None:
    cluster = FakeCluster()
    subject = reconciler(cluster, clock)
    run_pass(subject, cluster)
    cluster.set_pod_state("sums-attempt-1", "Succeeded", exit_code=0)
    assert cluster.job is not None
    cluster.job["metadata"]["deletionTimestamp"] = "2024-05-01T12:01:00Z"
    assert run_pass(subject, cluster).finalized
    assert "sums-cleanup" not in cluster.pods
    assert cluster.store is not None


def test_a_job_that_is_gone_ends_its_loop_and_leaves_the_metrics(
    clock: Clock, metrics: OperatorMetrics
) -> None:
    cluster = FakeCluster()
    subject = reconciler(cluster, clock, metrics)
    run_pass(subject, cluster)
    assert 'cjob_operator_jobs{phase="Pending"} 1.0' in metric_text(metrics)
    cluster.job = None
    assert run_pass(subject, cluster).gone
    assert 'cjob_operator_jobs{phase="Pending"} 0.0' in metric_text(metrics)


def test_pods_of_an_earlier_job_with_the_same_name_are_not_this_jobs_pods(clock: Clock) -> None:
    cluster = FakeCluster()
    run_pass(reconciler(cluster, clock), cluster)
    pod = cluster.pod_list()[0]
    stranger = {**pod, "metadata": {**pod["metadata"], "ownerReferences": [{"uid": "old-uid"}]}}
    assert observe_pods([stranger], job_name="sums", job_uid="uid-1") == ()
    assert len(observe_pods([pod], job_name="sums", job_uid="uid-1")) == 1
    assert observe_pods([pod], job_name="other", job_uid="uid-1") == ()


def deleted_after_attempt_one(clock: Clock, *, phase: str,
                              exit_code: int) -> tuple[FakeCluster, Reconciler]:
    """A job with ``cleanupPolicy.checkpoints: Delete`` whose first driver ended in
    ``phase`` with ``exit_code``, then deleted (no pass has seen the deletion yet)."""
    cluster = FakeCluster(job=job_document(cleanupPolicy={"checkpoints": "Delete"}))
    subject = reconciler(cluster, clock)
    run_pass(subject, cluster)
    cluster.set_pod_state("sums-attempt-1", phase, exit_code=exit_code)
    assert cluster.job is not None
    cluster.job["metadata"]["deletionTimestamp"] = "2024-05-01T12:01:00Z"
    return cluster, subject


def test_a_failing_cleanup_pod_keeps_the_data_says_why_and_lets_the_job_go(
    clock: Clock,
) -> None:
    """The operator reads no Secrets and touches no storage: when the cleanup pod
    cannot delete the data, the deletion still finishes, and the Event says why."""
    cluster, subject = deleted_after_attempt_one(clock, phase="Succeeded", exit_code=0)
    assert not run_pass(subject, cluster).finalized
    cluster.set_pod_state(
        "sums-cleanup", "Failed", exit_code=7,
        message="checkpoint data kept: cannot delete s3://b/sums-uid-1: access denied")
    assert run_pass(subject, cluster).finalized
    (retained,) = [e for e in cluster.events if e.reason == "CheckpointsRetained"]
    assert retained.type == "Warning"
    assert "file:///ckpt/sums-uid-1" in retained.message
    assert "exit code 7" in retained.message
    assert "access denied" in retained.message
    assert "CheckpointsDeleted" not in cluster.reasons()
    assert cluster.store is not None and cluster.store.owners == (), \
        "the index of the kept data outlives the job"
    assert "access denied" in cluster.store_annotations["checkpointed.io/retained"]


def test_a_cleanup_pod_the_api_server_refuses_keeps_the_data_and_lets_the_job_go(
    clock: Clock,
) -> None:
    cluster, subject = deleted_after_attempt_one(clock, phase="Succeeded", exit_code=0)
    cluster.fail["create_pod"] = ClusterError(
        operation="create pod team/sums-cleanup", cause="HTTP 403: exceeded quota",
        retryable=False)
    assert run_pass(subject, cluster).finalized
    (retained,) = [e for e in cluster.events if e.reason == "CheckpointsRetained"]
    assert "file:///ckpt/sums-uid-1" in retained.message
    assert "exceeded quota" in retained.message
    assert cluster.store is not None and cluster.store.owners == ()
    assert "sums-checkpoints" in retained.message


def test_deleting_with_cleanup_delete_waits_for_the_executors_that_may_still_upload(
    clock: Clock,
) -> None:
    cluster, subject = deleted_after_attempt_one(clock, phase="Failed", exit_code=143)
    executor = copy.deepcopy(cluster.pod_list()[0])
    executor["metadata"].update(
        name="sums-attempt-1-exec-1",
        labels={"checkpointed.io/job": "sums", "checkpointed.io/role": "executor"},
        ownerReferences=[{"apiVersion": "v1", "kind": "Pod", "name": "sums-attempt-1",
                          "uid": "driver-uid"}])
    cluster.pods["sums-attempt-1-exec-1"] = executor
    cluster.set_pod_state("sums-attempt-1-exec-1", "Running")
    run_pass(subject, cluster)
    assert "delete_pod(sums-attempt-1-exec-1)" in cluster.calls
    assert "sums-cleanup" not in cluster.pods, "no cleanup while an executor may still upload"
    assert "1 executor pod" in cluster.status["message"]
    cluster.set_pod_state("sums-attempt-1-exec-1", "Failed", exit_code=143)
    run_pass(subject, cluster)
    assert "sums-cleanup" in cluster.pods


class TestPodsTheOperatorDidNotCreate:
    """Anyone who may create pods in the namespace can label one as the job's standby
    or driver. Only pods owned by the job are its pods; the others are reported once."""

    def impostor(self, cluster: FakeCluster, *, role: str = "standby",
                 owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        pod = copy.deepcopy(cluster.pod_list()[0])
        metadata = pod["metadata"]
        metadata["name"] = "sums-standby-9"
        metadata["labels"]["checkpointed.io/role"] = role
        # Even the spec hash copied from the real driver: the labels and annotations
        # of a pod are anyone's to read and copy.
        if owners is None:
            metadata.pop("ownerReferences", None)
        else:
            metadata["ownerReferences"] = owners
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                         "containerStatuses": [{"name": "driver", "ready": True,
                                                "state": {"running": {}}}]}
        return pod

    def test_a_pod_without_an_owner_is_not_the_jobs_pod(self, clock: Clock) -> None:
        cluster = FakeCluster()
        run_pass(reconciler(cluster, clock), cluster)
        planted = self.impostor(cluster)
        assert observe_pods([planted], job_name="sums", job_uid="uid-1") == ()
        assert foreign_pods([planted, cluster.pod_list()[0]], job_name="sums",
                            job_uid="uid-1") == ("sums-standby-9",)

    def test_a_planted_standby_is_neither_kept_nor_promoted_and_an_event_says_so_once(
            self, clock: Clock) -> None:
        cluster = FakeCluster(job=job_document(standby={"enabled": True}))
        subject = reconciler(cluster, clock)
        run_pass(subject, cluster)
        cluster.set_pod_state("sums-attempt-1", "Running")
        cluster.pods["sums-standby-9"] = self.impostor(cluster)
        for _ in range(3):
            run_pass(subject, cluster)
        assert "sums-standby-1" in cluster.pods, "the job gets a standby of its own"

        cluster.set_pod_state("sums-attempt-1", "Failed", exit_code=137)
        for _ in range(3):
            clock.advance(2)
            run_pass(subject, cluster)
        assert not any("sums-standby-9" in call for call in cluster.calls if
                       call.startswith(("promote_standby", "delete_pod"))), cluster.calls
        assert cluster.status["driverPod"] != "sums-standby-9"
        assert "deletionTimestamp" not in cluster.pods["sums-standby-9"]["metadata"]
        warnings = [e for e in cluster.events if e.reason == "ForeignPodIgnored"]
        assert len(warnings) == 1 and warnings[0].type == "Warning"
        assert "sums-standby-9" in warnings[0].message
