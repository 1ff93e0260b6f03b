"""``kubectl scale`` on a running job, on the real node: 2 -> 3 -> 2 subtasks with
``upgradeMode: Snapshot``, each time a final checkpoint the sinks commit and the driver
stops after, then the new parallelism from it (the key groups split anew), with the
running sums exactly once at the end. The scale subresource reports the replicas of
the running attempt and the pods' selector, and refuses more replicas than
``maxParallelism``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from e2e.cluster_scenarios import RATE, apply_s3_job, finished, verify_output
from e2e.kind.chart import ChartRelease, HelmCommandError
from e2e.realnode import scenario
from e2e.realnode.cluster_s3 import ClusterS3
from e2e.realnode.pytest_plugin import RealCluster

COUNT = RATE * 40  # 40 s of input: the two rescales happen in its first seconds


def test_kubectl_scale_rescales_a_running_job_from_its_latest_checkpoint_exactly_once(
    real_cluster: RealCluster,
    restricted_namespace: str,
    operator: ChartRelease,
    cluster_s3: ClusterS3,
    kubectl: scenario.Kubectl,
    record_property: Any,
) -> None:
    rest = real_cluster.rest()
    created_at = time.monotonic()
    namespace = restricted_namespace
    job, bucket = apply_s3_job(rest=rest, kubectl=kubectl, s3=cluster_s3, namespace=namespace,
                               name="scaled", master="local[4]", count=COUNT)
    kubectl("patch", "--namespace", namespace, "checkpointedjob/scaled", "--type=merge",
            "-p", '{"spec": {"upgradeMode": "Snapshot"}}')

    def scale() -> dict[str, Any]:
        answer: dict[str, Any] = rest.get(
            f"/apis/checkpointed.io/v1alpha1/namespaces/{namespace}/checkpointedjobs/scaled/scale")
        return answer

    def runs_at(parallelism: int, *, after: int) -> int | None:
        """The checkpoint id the rescaled attempt reached past ``after``, once status
        reports it running at ``parallelism``."""
        status = job.status()
        if (status.get("parallelism") != parallelism or status.get("phase") != "Running"
                or (after > 1 and "restoredFrom" not in status)):
            return None
        latest = job.latest_checkpoint_id()
        return latest if latest > after else None

    first = scenario.wait_until(lambda: runs_at(2, after=1), what="checkpoint 2 at 2 subtasks",
                                timeout=300, detail=job.describe)
    cold_start = time.monotonic() - created_at
    record_property("cold_start_to_checkpoint_2_s", round(cold_start, 1))
    assert scale()["status"] == {"replicas": 2, "selector": "checkpointed.io/job=scaled"}
    attempts = [job.status()["attempt"]]

    for replicas in (3, 2):
        scaled_at = time.monotonic()
        kubectl("scale", "--namespace", namespace, "checkpointedjob/scaled",
                f"--replicas={replicas}")
        reached = scenario.wait_until(lambda n=replicas, a=first: runs_at(n, after=a),
                                      what=f"a checkpoint at {replicas} subtasks", timeout=300,
                                      detail=job.describe)
        status = job.status()
        assert status["attempt"] > attempts[-1], "a rescale starts a new attempt"
        assert status["restoredFrom"]["id"] > first, \
            "a rescale restores the final checkpoint taken after the change"
        attempts.append(status["attempt"])
        first = reached
        assert scale()["status"]["replicas"] == replicas
        took = time.monotonic() - scaled_at
        record_property(f"scale_to_{replicas}_to_checkpoint_s", round(took, 1))
        print(f"scale to {replicas}: {took:.1f}s to a checkpoint at the new parallelism "
              f"({took / cold_start:.2f}x the cold start's {cold_start:.1f}s)")

    with pytest.raises(HelmCommandError) as refused:
        kubectl("scale", "--namespace", namespace, "checkpointedjob/scaled", "--replicas=500")
    assert "parallelism must be <= maxParallelism" in refused.value.stderr

    done = finished(job, timeout=600)
    assert done["phase"] == "Succeeded", job.describe()
    assert done["restarts"] == 0, "a rescale is an upgrade, not a failure"
    records = scenario.read_jsonl_objects(cluster_s3.client(), bucket=bucket, prefix="output/")
    assert verify_output(records, count=COUNT) == []
