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
    assert args[args.index("--attempt") + 1] == "2", "it takes no attempt before the next"
    assert args[args.index("--store") + 1] == "configmap:team/sums-checkpoints"
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


def test_a_promotion_left_half_done_is_never_trusted_the_next_pass_fences_past_it() -> None:
    """The ConfigMap says "attempt 2" but the pod's relabel failed: the standby may be
    running attempt 2 already. The next pass must not let anything run under a fence
    that attempt 2 still passes: it fences a newer attempt before promoting again."""
    from cjob_operator.cluster import ClusterError

    cluster, subject, clock = running_with_standby(ready=True)
    original = cluster.promote_standby
    failures = iter([True])

    def relabel_fails_once(**kwargs: object) -> None:
        labels = dict(cluster.pods[STANDBY_1]["metadata"]["labels"])
        original(**kwargs)  # type: ignore[arg-type]
        if next(failures, False):
            cluster.pods[STANDBY_1]["metadata"]["labels"] = labels
            raise ClusterError(operation="label the promoted standby", cause="503")

    cluster.promote_standby = relabel_fails_once  # type: ignore[method-assign]
    cluster.set_pod_state("sums-attempt-1", "Failed", exit_code=137)
    clock.advance(40)
    outcome = subject.reconcile(namespace="team", name="sums", pods=cluster.pod_list())
    assert outcome.error is not None
    assert cluster.status["attempt"] == 1, "no status claims what did not happen"
    clock.advance(2)
    run_pass(subject, cluster)
    promoted = StandbyPromotion.decode(cluster.store_annotations[PROMOTION_ANNOTATION])
    assert cluster.store is not None
    assert cluster.store.fence_attempt == promoted.attempt == cluster.status["attempt"] > 2
    second = len(cluster.calls) - cluster.calls[::-1].index(
        f"promote_standby({STANDBY_1}, {promoted.attempt})") - 1
    assert cluster.calls.index(f"advance_fence({promoted.attempt})") < second


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
