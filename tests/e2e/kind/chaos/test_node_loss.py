"""A node stops under a running job, on kind with two real kubelets.

The job's driver and executors run on the worker node, which is then frozen whole
(``docker pause``: its kubelet, containerd and pods stop at once, as a machine that
hangs or drops off the network stops). The API server hears nothing more from it; the
controller manager marks the Node ``Ready: Unknown`` after its grace period, while the
pods still say Running and would be evicted only after the 300 s their tolerations
allow. The operator reads the Node, ends the attempt (``NodeLost``), force-deletes the
driver and starts the next attempt on the control-plane node from the latest
checkpoint. Then the worker comes back with the old driver exactly where it stopped:
it must not land any output (the fence, and its deleted pod, stop it), and the job's
output is exactly once.

Not part of ``make test`` (a second node and a minute of node-monitor grace do not
fit CI's budget): ``make test-chaos`` runs it, after the real node's chaos run.
"""

from __future__ import annotations

import time
from typing import Any

from e2e import cluster_scenarios
from e2e.kind.chart import ChartRelease
from e2e.kind.cluster import KindCluster
from e2e.realnode import scenario
from e2e.realnode.cluster_s3 import ClusterS3

EVICTION_SECONDS = 300
"""How long Kubernetes itself lets a pod of an unreachable node run on (the default
tolerations' ``tolerationSeconds``); the job must move long before."""


def pods_on(cluster: KindCluster, node: str) -> list[str]:
    """Pods bound to ``node`` that are not a DaemonSet's (those run on every node)."""
    items = cluster.rest().get("/api/v1/pods",
                               query={"fieldSelector": f"spec.nodeName={node}"})["items"]
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in items
            if not any(ref.get("kind") == "DaemonSet"
                       for ref in p["metadata"].get("ownerReferences", []))]


def node_of(pod: dict[str, Any] | None) -> str:
    return str((pod or {}).get("spec", {}).get("nodeName") or "")


def test_a_job_whose_node_stops_moves_to_the_other_node_with_exactly_once_output(
    kind_cluster: KindCluster,
    kind_namespace: str,
    operator: ChartRelease,
    cluster_s3: ClusterS3,
    kubectl: scenario.Kubectl,
    record_property: Any,
) -> None:
    rest = kind_cluster.rest()
    stays, stops = kind_cluster.node, kind_cluster.worker_nodes[0]
    # What the job needs besides its own pods (the operator, S3, the cluster's DNS)
    # is on the node that stays.
    scenario.wait_until(lambda: pods_on(kind_cluster, stops) == [],
                        what=f"no pod but DaemonSets' on {stops}", timeout=120,
                        detail=lambda: str(pods_on(kind_cluster, stops)))  # fmt: skip

    # The job's first attempt goes to the node that will stop.
    kind_cluster.cordon(stays)
    kind_cluster.cordon(stops, unschedulable=False)
    try:
        job, bucket = cluster_scenarios.apply_s3_job(
            rest=rest, kubectl=kubectl, s3=cluster_s3, namespace=kind_namespace,
            name="sum", master="k8s", driver_cores="300m")  # fmt: skip

        def explain() -> str:
            driver = job.status().get("driverPod")
            tail = job.logs(driver)[-3000:] if driver else ""
            return f"{job.describe()}\ndriver log:\n{tail}"

        scenario.wait_until(lambda: len(job.running_executors()) == 2,
                            what="two running executors", timeout=300, detail=explain)
        scenario.wait_until(lambda: job.latest_checkpoint_id() >= 2, what="checkpoint 2",
                            timeout=180, detail=explain)  # fmt: skip
    finally:
        kind_cluster.cordon(stays, unschedulable=False)
    first = job.status()
    assert node_of(job.driver()) == stops
    assert {node_of(p) for p in job.running_executors()} == {stops}
    before = job.latest_checkpoint_id()

    stopped_at = time.monotonic()
    kind_cluster.pause_node(stops)
    try:
        scenario.wait_until(
            lambda: (job.status().get("lastFailure") or {}).get("reason") == "NodeLost",
            what="the attempt ended as NodeLost", timeout=EVICTION_SECONDS,
            detail=explain)  # fmt: skip
        detected = time.monotonic() - stopped_at
        status = scenario.wait_until(
            lambda: (s := job.status()).get("attempt", 0) > first["attempt"]
            and s.get("latestCheckpoint", {}).get("id", 0) > before and s,
            what="the next attempt's first checkpoint", timeout=EVICTION_SECONDS,
            detail=explain)  # fmt: skip
        recovered = time.monotonic() - stopped_at
        record_property("node_stopped_to_node_lost_s", round(detected, 1))
        record_property("node_stopped_to_next_checkpoint_s", round(recovered, 1))
        print(f"node stopped -> NodeLost {detected:.1f}s -> next attempt's checkpoint "
              f"{recovered:.1f}s")
        assert recovered < EVICTION_SECONDS
        assert node_of(job.driver()) == stays
        restored = status.get("restoredFrom") or {}
        assert restored.get("id", 0) >= before, status
    finally:
        # The worker comes back with the old driver where it stopped, mid-run.
        kind_cluster.resume_node(stops)

    final = cluster_scenarios.finished(job, timeout=600)
    assert final["phase"] == "Succeeded", job.describe()
    assert any(e.startswith("NodeLost") for e in job.events()), job.events()
    records = scenario.read_jsonl_objects(cluster_s3.client(), bucket=bucket, prefix="output/")
    problems = cluster_scenarios.verify_output(records, count=cluster_scenarios.COUNT)
    assert problems == [], problems[:5]
