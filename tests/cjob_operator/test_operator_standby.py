"""spec.standby under the operator: a warm standby pod, promoted through the store.

The reconciliation glue against the fake API: which pod is created, in which order
the fence and the promotion are written, and how a promoted pod is seen afterwards.
The standby's own side (watching the ConfigMap) runs against a real API server in
``test_operator_standby_api.py``.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from cjob_operator.reconcile import Reconciler
from fake_cluster import T0, Clock, FakeCluster, job_document
from pod_settings import runtime_settings_of

from cjob_spec.driver_beacon import DriverLost
from cjob_spec.standby_signal import PROMOTION_ANNOTATION, StandbyPromotion

STANDBY_1 = "sums-standby-1"


def with_standby() -> FakeCluster:
    return FakeCluster(job=job_document(standby={"enabled": True}))


def run_pass(subject: Reconciler, cluster: FakeCluster) -> None:
    outcome = subject.reconcile(namespace="team", name="sums", pods=cluster.pod_list())
    assert outcome.error is None, outcome.error


def running_with_standby(*, ready: bool) -> tuple[FakeCluster, Reconciler, Clock]:
    """Attempt 1 running, a checkpoint completed, and its standby started."""
    cluster, clock = with_standby(), Clock()
    subject = Reconciler(cluster=cluster, clock=clock)
    run_pass(subject, cluster)
    cluster.set_pod_state("sums-attempt-1", "Running")
    run_pass(subject, cluster)
    assert STANDBY_1 in cluster.pods
    cluster.set_pod_state(STANDBY_1, "Running", ready=ready)
    cluster.complete_checkpoint(4, at=T0 + timedelta(seconds=6))
    run_pass(subject, cluster)
    return cluster, subject, clock


def fail_driver(cluster: FakeCluster, subject: Reconciler, clock: Clock) -> None:
    cluster.set_pod_state("sums-attempt-1", "Failed", exit_code=137)
    clock.advance(40)  # past the failure and its backoff
    run_pass(subject, cluster)


# --- the standby pod ------------------------------------------------------------------------


def test_a_running_job_that_asks_for_a_standby_gets_one_standby_pod() -> None:
    cluster, _, _ = running_with_standby(ready=False)
    pod = cluster.pods[STANDBY_1]
    labels = pod["metadata"]["labels"]
    assert labels["checkpointed.io/role"] == "standby"
    assert labels["checkpointed.io/attempt"] == "1"
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--standby-pod") + 1] == STANDBY_1
    settings = runtime_settings_of(pod)
    assert settings.attempt == 2, "it takes no attempt before the next"
    assert settings.store == "configmap:team/sums-checkpoints"
    probe = pod["spec"]["containers"][0]["readinessProbe"]["exec"]["command"]
    ready_file = args[args.index("--standby-ready-file") + 1]
    assert not ready_file.startswith("/"), "in the container's temporary directory"
    assert probe[-1].endswith(f'/{ready_file}"')
    assert [name for name in cluster.pods if "standby" in name] == [STANDBY_1]


def test_a_job_without_a_standby_gets_none() -> None:
    cluster, clock = FakeCluster(), Clock()
    subject = Reconciler(cluster=cluster, clock=clock)
    run_pass(subject, cluster)
    cluster.set_pod_state("sums-attempt-1", "Running")
    run_pass(subject, cluster)
    assert list(cluster.pods) == ["sums-attempt-1"]


# --- promotion ---------------------------------------------------------------------------------


def test_a_failed_driver_is_replaced_by_the_ready_standby_after_the_fence_moved() -> None:
    cluster, subject, clock = running_with_standby(ready=True)
    fail_driver(cluster, subject, clock)
    assert "create_pod(sums-attempt-2)" not in cluster.calls
    assert cluster.calls.index("advance_fence(2)") \
        < cluster.calls.index(f"promote_standby({STANDBY_1}, 2)")
    promotion = StandbyPromotion.decode(cluster.store_annotations[PROMOTION_ANNOTATION])
    assert promotion == StandbyPromotion(attempt=2, restore="latest", pod=STANDBY_1)
    assert cluster.status["attempt"] == 2
    assert cluster.status["driverPod"] == STANDBY_1
    assert cluster.status["restarts"] == 1
    labels = cluster.pods[STANDBY_1]["metadata"]["labels"]
    assert (labels["checkpointed.io/role"], labels["checkpointed.io/attempt"]) == ("driver", "2")


def test_a_standby_that_is_not_ready_yet_is_not_promoted_and_a_new_driver_starts() -> None:
    cluster, subject, clock = running_with_standby(ready=False)
    fail_driver(cluster, subject, clock)
    assert "create_pod(sums-attempt-2)" in cluster.calls
    assert PROMOTION_ANNOTATION not in cluster.store_annotations
    assert cluster.status["driverPod"] == "sums-attempt-2"


def test_the_promoted_pod_runs_the_attempt_and_a_new_standby_is_started_beside_it() -> None:
    cluster, subject, clock = running_with_standby(ready=True)
    fail_driver(cluster, subject, clock)
    run_pass(subject, cluster)
    cluster.set_pod_state(STANDBY_1, "Running", ready=True)
    run_pass(subject, cluster)
    assert cluster.status["phase"] == "Running"
    assert cluster.status["driverPod"] == STANDBY_1
    assert "sums-standby-2" in cluster.pods
    assert not any(c.startswith("delete_pod(sums-standby-1") for c in cluster.calls)


def promote_then_fail(cluster: FakeCluster, *, relabel: bool, times: int = 1) -> None:
    """``promote_standby`` writes the promotion (and the relabel, with ``relabel``)
    and then fails, ``times`` times: a refused relabel, or an operator killed between
    two writes."""
    from cjob_operator.cluster import ClusterError

    original = cluster.promote_standby
    failures = iter([True] * times)

    def fails(**kwargs: object) -> None:
        labels = dict(cluster.pods[STANDBY_1]["metadata"]["labels"])
        original(**kwargs)  # type: ignore[arg-type]
        if next(failures, False):
            if not relabel:
                cluster.pods[STANDBY_1]["metadata"]["labels"] = labels
            raise ClusterError(operation="label the promoted standby", cause="503")

    cluster.promote_standby = fails  # type: ignore[method-assign]


class TestAPromotionLeftHalfDone:
    """A promotion is three writes (the promotion on the store, the pod's labels, the
    job's status), and a pass may stop after any of them. The next pass finishes the
    same promotion: one takeover, one restart counted, the promoted pod kept."""

    def assert_one_takeover(self, cluster: FakeCluster) -> None:
        assert cluster.store is not None
        assert cluster.store.fence_attempt == 2, "no attempt fences out the takeover"
        assert StandbyPromotion.decode(cluster.store_annotations[PROMOTION_ANNOTATION]) == \
            StandbyPromotion(attempt=2, restore="latest", pod=STANDBY_1)
        assert cluster.status["attempt"] == 2
        assert cluster.status["driverPod"] == STANDBY_1
        assert cluster.status["restarts"] == 1
        labels = cluster.pods[STANDBY_1]["metadata"]["labels"]
        assert (labels["checkpointed.io/role"], labels["checkpointed.io/attempt"]) == \
            ("driver", "2")
        assert not any(c.startswith(f"delete_pod({STANDBY_1}") for c in cluster.calls)
        assert "create_pod(sums-attempt-2)" not in cluster.calls
        assert "create_pod(sums-attempt-3)" not in cluster.calls

    def fail_and_resume(self, cluster: FakeCluster, subject: Reconciler, clock: Clock) -> None:
        cluster.set_pod_state("sums-attempt-1", "Failed", exit_code=137)
        clock.advance(40)
        outcome = subject.reconcile(namespace="team", name="sums", pods=cluster.pod_list())
        assert outcome.error is not None
        assert cluster.status["attempt"] == 1, "no status claims what did not happen"
        clock.advance(2)
        run_pass(subject, cluster)

    def test_a_refused_relabel_is_redone_for_the_same_attempt(self) -> None:
        cluster, subject, clock = running_with_standby(ready=True)
        promote_then_fail(cluster, relabel=False)
        self.fail_and_resume(cluster, subject, clock)
        self.assert_one_takeover(cluster)
        assert cluster.calls.count(f"promote_standby({STANDBY_1}, 2)") == 2

    def test_a_lost_status_write_keeps_the_relabelled_pod_as_the_attempts_driver(
            self) -> None:
        cluster, subject, clock = running_with_standby(ready=True)
        promote_then_fail(cluster, relabel=True)
        self.fail_and_resume(cluster, subject, clock)
        self.assert_one_takeover(cluster)

    def test_a_lost_status_write_after_a_finished_promotion_is_resumed(self) -> None:
        cluster, subject, clock = running_with_standby(ready=True)
        cluster.fail_status_once = True
        cluster.set_pod_state("sums-attempt-1", "Failed", exit_code=137)
        clock.advance(40)
        outcome = subject.reconcile(namespace="team", name="sums", pods=cluster.pod_list())
        assert outcome.error is not None and cluster.status["attempt"] == 1
        clock.advance(2)
        run_pass(subject, cluster)
        self.assert_one_takeover(cluster)

    def test_the_promoted_pod_then_runs_the_attempt(self) -> None:
        cluster, subject, clock = running_with_standby(ready=True)
        promote_then_fail(cluster, relabel=True)
        self.fail_and_resume(cluster, subject, clock)
        cluster.set_pod_state(STANDBY_1, "Running", ready=True)
        run_pass(subject, cluster)
        assert cluster.status["phase"] == "Running"
        assert cluster.status["driverPod"] == STANDBY_1


# --- a standby's report that the driver is lost -----------------------------------------------


def test_a_standbys_report_promotes_it_before_the_kubelet_notices_the_driver_is_gone() -> None:
    cluster, subject, _ = running_with_standby(ready=True)
    report = DriverLost(attempt=1, pod=STANDBY_1, at=T0.timestamp() + 7,
                        detail="its connection closed")
    assert cluster.store is not None
    cluster.store = dataclasses.replace(cluster.store, driver_lost=report)
    run_pass(subject, cluster)  # the driver pod still says Running
    assert cluster.calls.index("advance_fence(2)") \
        < cluster.calls.index(f"promote_standby({STANDBY_1}, 2)")
    assert cluster.status["attempt"] == 2 and cluster.status["driverPod"] == STANDBY_1
    assert cluster.status["lastFailure"]["reason"] == "DriverLost"
    assert [event.reason for event in cluster.events].count("DriverLost") == 1
    # The old driver's pod is left to end by itself, and kept for its logs.
    assert not any(call.startswith("delete_pod(sums-attempt-1") for call in cluster.calls)
    cluster.set_pod_state("sums-attempt-1", "Failed", exit_code=137)
    run_pass(subject, cluster)
    assert "sums-attempt-1" in cluster.pods
    assert cluster.status["lastFailure"]["reason"] == "DriverLost"
    assert cluster.status["lastFailure"]["exitCode"] == 137
