"""A driver whose node stopped reporting is replaced at once: the pod still says
Running (the cluster would evict it only minutes later), so the operator asks the
Node, deletes the pod with no grace period and starts the next attempt behind a new
fence. A node it may not read is taken for alive, and said once."""

from __future__ import annotations

from typing import Any

import pytest
from cjob_operator.cluster import ClusterError
from cjob_operator.node_health import NodeHealth
from cjob_operator.observed import node_lost_since
from cjob_operator.observed import running_on as nodes_to_read
from cjob_operator.reconcile import Reconciler
from fake_cluster import Clock, FakeCluster


def run_pass(subject: Reconciler, cluster: FakeCluster) -> None:
    subject.reconcile(namespace="team", name="sums", pods=cluster.pod_list())


def node(name: str, ready: str, *, since: str = "2024-05-01T12:01:00Z") -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"conditions": [
        {"type": "MemoryPressure", "status": "False"},
        {"type": "Ready", "status": ready, "lastTransitionTime": since,
         "reason": "NodeStatusUnknown" if ready == "Unknown" else "KubeletReady"}]}}


def running_on(cluster: FakeCluster, subject: Reconciler, pod: str, node_name: str) -> None:
    run_pass(subject, cluster)
    cluster.pods[pod]["spec"]["nodeName"] = node_name
    cluster.set_pod_state(pod, "Running", ready=True)
    run_pass(subject, cluster)


def test_a_driver_on_a_node_that_stopped_reporting_is_force_deleted_and_replaced() -> None:
    cluster, clock = FakeCluster(), Clock()
    subject = Reconciler(cluster=cluster, clock=clock)
    running_on(cluster, subject, "sums-attempt-1", "node-b")
    assert "delete_pod" not in " ".join(cluster.calls)

    cluster.nodes["node-b"] = node("node-b", "Unknown")
    clock.advance(10)  # the node's reading is remembered for a few seconds
    run_pass(subject, cluster)
    assert cluster.force_deleted == ["sums-attempt-1"], cluster.calls
    assert "NodeLost" in cluster.reasons()
    clock.advance(30)
    run_pass(subject, cluster)
    assert "create_pod(sums-attempt-2)" in cluster.calls
    assert "advance_fence(2)" in cluster.calls


def test_a_node_that_reports_not_ready_still_runs_its_pods() -> None:
    cluster, clock = FakeCluster(), Clock()
    subject = Reconciler(cluster=cluster, clock=clock)
    running_on(cluster, subject, "sums-attempt-1", "node-b")
    cluster.nodes["node-b"] = node("node-b", "False")
    clock.advance(60)
    run_pass(subject, cluster)
    assert "NodeLost" not in cluster.reasons()
    assert "create_pod(sums-attempt-2)" not in cluster.calls


def test_only_an_unknown_ready_condition_means_lost() -> None:
    assert node_lost_since(node("a", "True")) is None
    assert node_lost_since(node("a", "False")) is None
    since = node_lost_since(node("a", "Unknown", since="2024-05-01T12:01:00Z"))
    assert since is not None and since.isoformat() == "2024-05-01T12:01:00+00:00"
    assert node_lost_since({"metadata": {"name": "a"}}) is None


def test_a_node_the_operator_may_not_read_is_taken_for_alive_and_said_once(
        caplog: pytest.LogCaptureFixture) -> None:
    def refuse(name: str) -> dict[str, Any]:
        raise ClusterError(operation=f"read node {name}", cause="forbidden", retryable=False)

    health = NodeHealth(read_node=refuse, remember_seconds=0)
    assert health.lost(["node-b"]) == {}
    assert health.lost(["node-b"]) == {}
    assert [r.message for r in caplog.records].count(
        next(r.message for r in caplog.records)) == 1


def test_readings_of_a_node_are_shared_for_a_few_seconds() -> None:
    reads: list[str] = []
    now = [0.0]

    def read(name: str) -> dict[str, Any]:
        reads.append(name)
        return node(name, "True")

    health = NodeHealth(read_node=read, remember_seconds=5, monotonic=lambda: now[0])
    health.lost(["a", "a", "b"])
    health.lost(["a"])
    now[0] = 6.0
    health.lost(["a"])
    assert reads == ["a", "b", "a"]


def test_only_the_nodes_of_live_drivers_and_standbys_are_read() -> None:
    def pod(role: str, node_name: str, phase: str = "Running") -> dict[str, Any]:
        return {"metadata": {"labels": {"checkpointed.io/role": role}},
                "spec": {"nodeName": node_name}, "status": {"phase": phase}}

    assert nodes_to_read([pod("driver", "a"), pod("standby", "b"), pod("executor", "c"),
                       pod("driver", "d", phase="Failed")]) == {"a", "b"}
