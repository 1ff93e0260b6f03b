"""CheckpointedJobSnapshots against a real API server, with their pods on the process
node: a running job's checkpoint copied, the job and its checkpoints deleted, a new
job started from the snapshot with its output exactly once, and the copy disposed of
with the object. Also what a user gets wrong: a snapshot of no job, a job started from
no snapshot, a snapshot's spec edited, two starting points at once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from operator_live import JobWatcher, Kubectl, OperatorProcess

from e2e.controlplane.rest import ApiError, quote
from e2e.controlplane.waiting import wait_for
from e2e.jobs import RUNNING_SUM_DIR, running_sum_job
from e2e.operator_process import SNAPSHOTS_PATH

sys.path.insert(0, str(RUNNING_SUM_DIR))
from verify import read_output, verify


def snapshot_manifest(namespace: str, name: str, job: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "checkpointed.io/v1alpha1", "kind": "CheckpointedJobSnapshot",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"jobName": job, **spec}}


def read_snapshot(rest: Any, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = rest.get(
            f"{SNAPSHOTS_PATH.format(namespace=quote(namespace))}/{quote(name)}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return found


def snapshot_until(rest: Any, namespace: str, name: str, state: str, *,
                   operator: OperatorProcess, timeout: float = 120) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        status = (read_snapshot(rest, namespace, name) or {}).get("status") or {}
        return status if status.get("state") == state else None
    try:
        return wait_for(reached, what=f"snapshot {name} to be {state}", timeout=timeout)
    except Exception:
        print((read_snapshot(rest, namespace, name) or {}).get("status"))
        print(operator.log_tail())
        raise


def snapshot_events(rest: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    items = rest.get(f"/api/v1/namespaces/{quote(namespace)}/events")["items"]
    return [e for e in items if e.get("involvedObject", {}).get("name") == name
            and e.get("involvedObject", {}).get("kind") == "CheckpointedJobSnapshot"]


def test_a_snapshot_outlives_its_job_and_starts_a_new_job_that_continues_exactly_once(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, process_node: Any,
    cjob_operator: OperatorProcess, tmp_path: Path,
) -> None:
    count = 10_000
    job = running_sum_job(name="first", namespace=kube_namespace, work_dir=tmp_path,
                          count=count, rate=400, cleanup="Delete")
    # One retained checkpoint, a new one every second: the copy's pod takes longer than
    # that to start, so only the hold keeps its source from being pruned under it.
    job["spec"]["checkpoint"]["retained"] = 1
    assert kubectl.apply(job).returncode == 0
    first = JobWatcher(rest=kube_rest, namespace=kube_namespace, name="first",
                       operator=cjob_operator)
    first.until(lambda s: s.get("latestCheckpoint", {}).get("id", 0) >= 2,
                what="two checkpoints", timeout=180)
    job_uid = first.get()["metadata"]["uid"]  # type: ignore[index]

    applied = kubectl.apply(snapshot_manifest(kube_namespace, "keep", "first"))
    assert applied.returncode == 0, applied.stderr
    done = snapshot_until(kube_rest, kube_namespace, "keep", "Completed",
                          operator=cjob_operator)
    snapshot_uid = read_snapshot(kube_rest, kube_namespace, "keep")["metadata"]["uid"]  # type: ignore[index]
    taken = done["checkpointId"]
    directory = tmp_path / "checkpoints" / "snapshots" / f"keep-{snapshot_uid}"
    assert done["path"] == f"{directory.as_uri()}/first-{job_uid}/chk-{taken}/_metadata"
    assert done["sizeBytes"] > 0 and done["files"] >= 2
    assert {c["type"]: c["status"] for c in done["conditions"]} == {"Ready": "True"}
    assert [e["reason"] for e in snapshot_events(kube_rest, kube_namespace, "keep")
            if e["reason"] == "SnapshotCompleted"] == ["SnapshotCompleted"]
    listed = kubectl.run("-n", kube_namespace, "get", "cjsnap")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "JOB", "CHECKPOINT", "SIZE", "STATE", "AGE"]
    assert row.split()[:3] == ["keep", "first", str(taken)] and "Completed" in row

    # The job goes on past the snapshot (its output too), then it and its checkpoints go.
    first.until(lambda s: s.get("latestCheckpoint", {}).get("id", 0) >= taken + 2,
                what="two more checkpoints", timeout=120)
    store_path = f"/api/v1/namespaces/{kube_namespace}/configmaps/first-checkpoints"
    store = kube_rest.get(store_path)
    assert "checkpointed.io/holds" not in store["metadata"].get("annotations", {}), \
        "the hold is let go once the copy is done"
    # And the copied checkpoint is pruned like any other: by the first checkpoint the
    # job adds after the release, which may still be to come when the copy finished
    # late (the job had already gone two checkpoints past it).
    wait_for(lambda: not [key for key in kube_rest.get(store_path)["data"]
                          if key.endswith(f"{taken:019d}")],
             what=f"checkpoint {taken} pruned once its hold was let go", timeout=60)
    assert kubectl.run("-n", kube_namespace, "delete", "checkpointedjob", "first",
                       "--wait=true", "--timeout=90s").returncode == 0
    assert not (tmp_path / "checkpoints" / f"first-{job_uid}").exists()
    assert Path(done["path"].removeprefix("file://")).is_file(), "the snapshot stays"

    # A new job from the snapshot: the old job's output past it is withdrawn.
    second_job = running_sum_job(name="second", namespace=kube_namespace, work_dir=tmp_path,
                                 count=count, rate=400, cleanup="Delete")
    second_job["spec"]["restore"] = {"snapshot": "keep"}
    assert kubectl.apply(second_job).returncode == 0
    second = JobWatcher(rest=kube_rest, namespace=kube_namespace, name="second",
                        operator=cjob_operator)
    finished = second.until(lambda s: s.get("phase") in ("Succeeded", "Failed"),
                            what="the new job to finish", timeout=300)
    assert finished["phase"] == "Succeeded", finished
    assert finished["restoredFrom"]["path"] == done["path"]
    assert finished["restoredFrom"]["id"] == taken
    problems = verify(read_output(tmp_path / "output"), count=count)
    assert problems == [], problems[:5]

    # Deleting the snapshot deletes its copy (disposeOnDelete defaults to true).
    assert kubectl.run("-n", kube_namespace, "delete", "cjsnap", "keep", "--wait=true",
                       "--timeout=90s").returncode == 0
    assert read_snapshot(kube_rest, kube_namespace, "keep") is None
    assert not any(path.is_file() for path in directory.rglob("*"))


def test_mistakes_wait_or_are_refused_with_the_reason(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, cjob_operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    # A snapshot of a job that does not exist waits for it, and goes at once when deleted.
    assert kubectl.apply(snapshot_manifest(kube_namespace, "early", "nojob")).returncode == 0
    waiting = snapshot_until(kube_rest, kube_namespace, "early", "Pending",
                             operator=cjob_operator, timeout=60)
    assert waiting["reason"] == "WaitingForJob"
    assert "nojob" in waiting["message"]

    # Its spec cannot change: a new snapshot is a new object.
    edited = kubectl.apply(snapshot_manifest(kube_namespace, "early", "other"))
    assert edited.returncode != 0 and "jobName cannot change" in edited.stderr
    assert kubectl.run("-n", kube_namespace, "delete", "cjsnap", "early", "--wait=true",
                       "--timeout=30s").returncode == 0

    # A job to start from a snapshot that is not there waits, Pending, and says so.
    job = running_sum_job(name="late", namespace=kube_namespace, work_dir=tmp_path,
                          count=100, rate=100)
    job["spec"]["restore"] = {"snapshot": "missing"}
    assert kubectl.apply(job).returncode == 0
    late = JobWatcher(rest=kube_rest, namespace=kube_namespace, name="late",
                      operator=cjob_operator)
    status = late.until(lambda s: s.get("reason") == "WaitingForSnapshot",
                        what="WaitingForSnapshot", timeout=60)
    assert status["phase"] == "Pending"
    assert "missing" in status["message"] and "does not exist" in status["message"]
    assert "late-attempt-1" not in late.pod_names()

    # Two starting points at once are refused at apply.
    both = running_sum_job(name="both", namespace=kube_namespace, work_dir=tmp_path,
                           count=100, rate=100)
    both["spec"]["restore"] = {"snapshot": "keep", "from": 3}
    refused = kubectl.apply(both)
    assert refused.returncode != 0 and "keep one" in refused.stderr


def test_a_jobs_periodic_snapshots_are_taken_and_the_oldest_pruned(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, process_node: Any,
    cjob_operator: OperatorProcess, tmp_path: Path,
) -> None:
    job = running_sum_job(name="periodic", namespace=kube_namespace, work_dir=tmp_path,
                          count=12_000, rate=400)
    job["spec"]["snapshots"] = {"interval": "5s", "maxCount": 1}
    assert kubectl.apply(job).returncode == 0

    def scheduled() -> list[dict[str, Any]]:
        found = kube_rest.get(
            f"{SNAPSHOTS_PATH.format(namespace=quote(kube_namespace))}"
            f"?labelSelector=checkpointed.io/job%3Dperiodic")["items"]
        return sorted(found, key=lambda s: s["metadata"]["name"])

    def first_completed() -> str | None:
        done = [s for s in scheduled() if (s.get("status") or {}).get("state") == "Completed"]
        return done[0]["metadata"]["name"] if done else None

    first = wait_for(first_completed, what="a periodic snapshot to complete", timeout=180)
    assert first.startswith("periodic-s-")
    labels = scheduled()[0]["metadata"]["labels"]
    assert labels["checkpointed.io/snapshot-trigger"] == "Scheduled"
    wait_for(lambda: first not in [s["metadata"]["name"] for s in scheduled()]
             and first_completed() is not None,
             what="a newer snapshot to complete and the first to be pruned", timeout=180)
    kubectl.run("-n", kube_namespace, "delete", "checkpointedjob", "periodic", "--wait=true",
                "--timeout=90s")
    assert [s["metadata"]["name"] for s in scheduled()], "the job's snapshots outlive it"
