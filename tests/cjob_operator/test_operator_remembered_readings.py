"""A pass plans from its last readings of the job and its store only while the watches
say neither changed, and never acts on them: a plan that would act is made again
from fresh reads."""

from __future__ import annotations

from datetime import timedelta

from cjob_operator.read_cache import ReadSettings, WatchedVersions
from cjob_operator.reconcile import Reconciler
from fake_cluster import T0, Clock, FakeCluster


def run_pass(subject: Reconciler, cluster: FakeCluster, watched: WatchedVersions) -> None:
    subject.reconcile(namespace="team", name="sums", pods=cluster.pod_list(), watched=watched)


def reads(cluster: FakeCluster) -> list[str]:
    return [call for call in cluster.calls if call in ("read_job", "read_store")]


def running_job(reads_settings: ReadSettings | None = None) -> tuple[FakeCluster, Reconciler]:
    """A job whose first driver runs, after the passes that got it there; its clock is
    already past the driver's end and restart backoff, should the driver fail."""
    cluster = FakeCluster()
    clock = Clock()
    subject = Reconciler(cluster=cluster, clock=clock, reads=reads_settings)
    run_pass(subject, cluster, WatchedVersions(job=cluster.version, store=None))
    cluster.set_pod_state("sums-attempt-1", "Running")
    run_pass(subject, cluster, WatchedVersions(job=cluster.version, store="s1"))
    cluster.calls.clear()
    clock.advance(40)
    return cluster, subject


def test_a_pass_whose_watches_saw_no_change_reads_neither_the_job_nor_the_store() -> None:
    cluster, subject = running_job()
    for _ in range(3):
        run_pass(subject, cluster, WatchedVersions(job=cluster.version, store="s1"))
    assert reads(cluster) == []
    assert "write_status" not in cluster.calls


def test_a_pass_plans_from_the_status_it_wrote_while_the_watch_still_shows_the_older_job() -> None:
    cluster, subject = running_job()
    before_write = cluster.version
    cluster.set_pod_state("sums-attempt-1", "Failed", exit_code=1)
    run_pass(subject, cluster, WatchedVersions(job=before_write, store="s1"))
    assert cluster.status["attempt"] == 2
    cluster.calls.clear()
    cluster.set_pod_state("sums-attempt-2", "Running")
    run_pass(subject, cluster, WatchedVersions(job=before_write, store="s2"))
    assert "read_job" not in cluster.calls
    assert [c for c in cluster.calls if c.startswith("create_pod")] == []
    assert cluster.status["phase"] == "Running"
    assert cluster.status["attempt"] == 2


def test_a_new_version_from_a_watch_makes_the_pass_read_again() -> None:
    cluster, subject = running_job()
    cluster.bump_version()  # a user's edit, say
    run_pass(subject, cluster, WatchedVersions(job=cluster.version, store="s1"))
    run_pass(subject, cluster, WatchedVersions(job=cluster.version, store="s2"))
    assert reads(cluster) == ["read_job", "read_store"]


def test_a_restart_restores_the_newest_checkpoint_even_when_its_watch_event_is_still_in_flight(
) -> None:
    cluster, subject = running_job()
    cluster.complete_checkpoint(7, at=T0 + timedelta(seconds=20))  # the watch still says s1
    cluster.set_pod_state("sums-attempt-1", "Failed", exit_code=137)
    run_pass(subject, cluster, WatchedVersions(job=cluster.version, store="s1"))
    assert "create_pod(sums-attempt-2)" in cluster.calls
    assert reads(cluster) == ["read_job", "read_store"]
    assert cluster.status["latestCheckpoint"]["id"] == 7


def test_readings_older_than_the_reuse_limit_are_read_again() -> None:
    cluster, subject = running_job(ReadSettings(reuse_seconds=0.0))
    run_pass(subject, cluster, WatchedVersions(job=cluster.version, store="s1"))
    assert reads(cluster) == ["read_job", "read_store"]


def test_a_pass_without_watched_versions_always_reads() -> None:
    cluster, subject = running_job()
    subject.reconcile(namespace="team", name="sums", pods=cluster.pod_list())
    assert reads(cluster) == ["read_job", "read_store"]
