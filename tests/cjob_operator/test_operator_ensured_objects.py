"""A job's ServiceAccount, Role, RoleBinding and NetworkPolicy are sent to the API server
when its first driver starts, not again at every restart: each costs a create that
answers "already exists" and a patch that changes nothing. They are sent again when
they would differ, and after a while in any case, so a deleted one comes back."""

from __future__ import annotations

from cjob_operator.cluster import ClusterError
from cjob_operator.read_cache import ReadSettings
from cjob_operator.reconcile import Reconciler
from fake_cluster import Clock, FakeCluster


def run_pass(subject: Reconciler, cluster: FakeCluster) -> None:
    subject.reconcile(namespace="team", name="sums", pods=cluster.pod_list())


def ensured(cluster: FakeCluster) -> list[str]:
    return [call for call in cluster.calls if call.startswith("ensure_object")]


def restart(subject: Reconciler, cluster: FakeCluster, clock: Clock, attempt: int) -> None:
    """The driver of ``attempt`` runs, fails, and the next attempt's pod is created."""
    cluster.set_pod_state(f"sums-attempt-{attempt}", "Running")
    run_pass(subject, cluster)
    cluster.set_pod_state(f"sums-attempt-{attempt}", "Failed", exit_code=137)
    clock.advance(40)
    run_pass(subject, cluster)
    assert f"create_pod(sums-attempt-{attempt + 1})" in cluster.calls


def test_a_restart_does_not_send_the_jobs_unchanged_objects_again() -> None:
    cluster, clock = FakeCluster(), Clock()
    subject = Reconciler(cluster=cluster, clock=clock)
    run_pass(subject, cluster)
    assert len(ensured(cluster)) == 4
    cluster.calls.clear()
    restart(subject, cluster, clock, attempt=1)
    assert ensured(cluster) == []


def test_a_job_created_again_under_the_same_name_gets_its_objects_again() -> None:
    cluster, clock = FakeCluster(), Clock()
    subject = Reconciler(cluster=cluster, clock=clock)
    run_pass(subject, cluster)
    assert cluster.job is not None
    cluster.job["metadata"]["uid"] = "uid-2"  # deleted and created again: a new owner
    cluster.job.pop("status")
    cluster.pods.clear()
    cluster.store = None
    cluster.calls.clear()
    run_pass(subject, cluster)
    assert len(ensured(cluster)) == 4


def test_the_objects_are_sent_again_after_the_reuse_limit() -> None:
    cluster, clock = FakeCluster(), Clock()
    subject = Reconciler(cluster=cluster, clock=clock, reads=ReadSettings(reuse_seconds=0.0))
    run_pass(subject, cluster)
    cluster.calls.clear()
    restart(subject, cluster, clock, attempt=1)
    assert len(ensured(cluster)) == 4


def test_a_failed_action_makes_the_next_pass_send_the_jobs_objects_again() -> None:
    """A driver pod refused because its ServiceAccount was deleted by hand must not wait
    out the reuse window: after any failed call the objects are sent again."""
    cluster, clock = FakeCluster(), Clock()
    subject = Reconciler(cluster=cluster, clock=clock)
    run_pass(subject, cluster)
    cluster.set_pod_state("sums-attempt-1", "Running")
    run_pass(subject, cluster)
    cluster.set_pod_state("sums-attempt-1", "Failed", exit_code=137)
    cluster.fail["create_pod"] = ClusterError(
        operation="create pod", cause='HTTP 403: serviceaccount "sums-driver" not found',
        retryable=False)
    clock.advance(40)
    run_pass(subject, cluster)
    del cluster.fail["create_pod"]
    cluster.calls.clear()
    for _ in range(10):  # through the restart policy's backoff to the next driver pod
        clock.advance(40)
        run_pass(subject, cluster)
        if any(call.startswith("create_pod") for call in cluster.calls):
            break
    created = next(i for i, call in enumerate(cluster.calls) if call.startswith("create_pod"))
    assert len([c for c in cluster.calls[:created] if c.startswith("ensure_object")]) == 4
