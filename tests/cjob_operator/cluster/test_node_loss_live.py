"""A node that dies under a running job, on a real API server with two nodes.

The job's driver runs on a second process node, which is then cut off from the API
server as a dead machine or a broken network would cut it off: no heartbeats, no pod
status, while the driver's process runs on unseen. The controller manager marks the
Node ``Ready: Unknown`` after its grace period; the pod still says Running, and the
cluster would evict it only after the 300 s its tolerations allow. The operator reads
the Node, ends the attempt (``NodeLost``), force-deletes the pod and starts the next
attempt on the node that is left, behind a new fence: the old driver, still running,
is stopped by the fence the first time it tries to commit a checkpoint. The output is
exactly once.

The nodes are the project's process nodes (pods as local processes): a kubelet of
this kind, unlike a real one, can be cut off from the API server while its processes
keep running, which is the case that must not produce output twice.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from operator_live import JobWatcher, Kubectl, OperatorProcess

from cjob_spec.exit_codes import ExitCode
from cjob_spec.names import DRIVER_CONTAINER
from e2e.controlplane.controlplane import ControlPlane
from e2e.controlplane.nodes import cordon
from e2e.controlplane.process_node import ProcessNode
from e2e.controlplane.rest import RestClient, quote
from e2e.controlplane.waiting import wait_for
from e2e.jobs import RUNNING_SUM_DIR, running_sum_job

sys.path.insert(0, str(RUNNING_SUM_DIR))
from verify import read_output, verify

COUNT = 60_000
"""Input for 150 s: the old driver, running on unseen, must still be reading when the
next attempt's fence stops it (the cut comes about 30 s in, the takeover a minute
later), or it would finish the job itself and never meet the fence."""
RATE = 400


def node_of(rest: RestClient, namespace: str, pod: str) -> str:
    found = rest.get(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}")
    return str(found["spec"].get("nodeName") or "")


def test_a_driver_whose_node_goes_silent_is_replaced_on_another_node_and_fenced(
    control_plane: ControlPlane, process_node: ProcessNode, kubectl: Kubectl,
    kube_rest: RestClient, kube_namespace: str, cjob_operator: OperatorProcess,
    tmp_path: Path, record_property: Any,
) -> None:
    other = ProcessNode(control_plane=control_plane, name="process-node-b")
    other.start()
    try:
        other.wait_until_ready(timeout=60)
        job = running_sum_job(name="sums", namespace=kube_namespace, work_dir=tmp_path,
                              count=COUNT, rate=RATE)
        watcher = JobWatcher(rest=kube_rest, namespace=kube_namespace, name="sums",
                             operator=cjob_operator)
        # The first driver goes to the node that will die: the other is cordoned.
        cordon(kube_rest, process_node.name, unschedulable=True)
        try:
            assert kubectl.apply(job).returncode == 0
            watcher.until(lambda s: s.get("latestCheckpoint", {}).get("id", 0) >= 2,
                          what="two checkpoints", timeout=180)
        finally:
            cordon(kube_rest, process_node.name, unschedulable=False)
        assert node_of(kube_rest, kube_namespace, "sums-attempt-1") == other.name
        zombie = next(run for run in other.worker_for(
            namespace=kube_namespace, name="sums-attempt-1").containers
            if run.name == DRIVER_CONTAINER)
        before = watcher.status()["latestCheckpoint"]["id"]

        cut = time.monotonic()
        other.partition()
        try:
            status = watcher.until(
                lambda s: s.get("attempt", 0) >= 2 and s.get("phase") == "Running"
                and s.get("latestCheckpoint", {}).get("id", 0) > before
                and s.get("restoredFrom") is not None,
                what="the next attempt checkpointing on the node that is left", timeout=300)
            recovered = time.monotonic() - cut
            record_property("node_silent_to_next_checkpoint_s", round(recovered, 1))
            print(f"node cut off -> next attempt's checkpoint: {recovered:.1f}s")
            assert status["lastFailure"]["reason"] == "NodeLost", status["lastFailure"]
            assert node_of(kube_rest, kube_namespace, status["driverPod"]) == process_node.name
            # Long before the 300 s after which the cluster would have evicted the pod.
            assert recovered < 300
            # The old driver ran on, unseen, and stopped by itself once the new attempt
            # took over, saying it was fenced (exit 9): at its next commit, or, when its
            # checkpoints failed first (the new attempt owns the storage now), once its
            # failure budget was spent. The operator force-deleted its pod, which revoked
            # its token, so the store may refuse it (HTTP 401) before it can read the
            # fence: that refusal says it was replaced too. None of its output landed
            # (checked below).
            ended = wait_for(lambda: zombie.state.get("terminated"),
                             what="the old driver to stop", timeout=120)
            log = other.read_pod_log(namespace=kube_namespace, name="sums-attempt-1",
                                     container=DRIVER_CONTAINER)
            assert ended["exitCode"] == ExitCode.FENCED, (ended, log[-4000:])
        finally:
            other.heal()

        finished = watcher.until(lambda s: s.get("phase") in ("Succeeded", "Failed"),
                                 what="the job to finish", timeout=400)
        assert finished["phase"] == "Succeeded", finished
        assert "NodeLost" in watcher.event_reasons()
        problems = verify(read_output(tmp_path / "output"), count=COUNT)
        assert problems == [], problems[:5]
    finally:
        other.stop()
