"""Upgrades against a real API server, drivers on the process node: a change that breaks
the job is rolled back to the spec that ran, which finishes exactly once; a stateless
upgrade starts the new spec with nothing restored."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from operator_live import JobWatcher, Kubectl, OperatorProcess
from pod_settings import runtime_settings_of

from e2e.jobs import RUNNING_SUM_DIR, running_sum_job

sys.path.insert(0, str(RUNNING_SUM_DIR))
from verify import read_output, verify


def test_a_failed_upgrade_is_rolled_back_and_the_job_finishes_exactly_once(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, process_node: Any,
    cjob_operator: OperatorProcess, tmp_path: Path,
) -> None:
    count = 12_000
    job = running_sum_job(name="guarded", namespace=kube_namespace, work_dir=tmp_path,
                          count=count, rate=400)
    job["spec"]["rollback"] = {"enabled": True, "readinessTimeout": "2m"}
    assert kubectl.apply(job).returncode == 0
    guarded = JobWatcher(rest=kube_rest, namespace=kube_namespace, name="guarded",
                         operator=cjob_operator)
    stable = guarded.until(lambda s: "lastStableSpec" in s, what="a stable spec",
                           timeout=180)
    assert stable["lastStableSpec"]["spec"]["job"]["entrypoint"] == "job:build"

    # A change whose code cannot load: its attempt fails at once, and is rolled back.
    kubectl.patch_job(kube_namespace, "guarded",
                      {"spec": {"job": {"entrypoint": "no_such_module:build"}}})
    back = guarded.until(
        lambda s: any(c["type"] == "RolledBack" and c["status"] == "True"
                      for c in s.get("conditions", [])) and s.get("phase") == "Running",
        what="the rollback to run", timeout=180)
    assert back["rolledBackSpecHash"] != back["specHash"]
    assert back["reason"] == "RolledBack"
    assert back["lastFailure"]["reason"] == "InvalidConfiguration"  # no such module
    (warning,) = [e for e in guarded.events() if e["reason"] == "RolledBack"
                  and e["type"] == "Warning"]
    assert "InvalidConfiguration" in warning["message"]
    pod = kube_rest.get(f"/api/v1/namespaces/{kube_namespace}/pods/{back['driverPod']}")
    assert runtime_settings_of(pod).entrypoint == "job:build", "the stable spec runs"
    spec = guarded.get()["spec"]  # type: ignore[index]
    assert spec["job"]["entrypoint"] == "no_such_module:build", "the user's spec is kept"

    done = guarded.until(lambda s: s.get("phase") in ("Succeeded", "Failed"),
                         what="the job to finish", timeout=300)
    assert done["phase"] == "Succeeded", done
    problems = verify(read_output(tmp_path / "output"), count=count)
    assert problems == [], problems[:5]


def test_a_stateless_upgrade_starts_the_new_spec_with_empty_state(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, process_node: Any,
    cjob_operator: OperatorProcess, tmp_path: Path,
) -> None:
    job = running_sum_job(name="fresh", namespace=kube_namespace, work_dir=tmp_path,
                          count=6_000, rate=400)
    job["spec"]["upgradeMode"] = "Stateless"
    assert kubectl.apply(job).returncode == 0
    fresh = JobWatcher(rest=kube_rest, namespace=kube_namespace, name="fresh",
                       operator=cjob_operator)
    before = fresh.until(lambda s: s.get("latestCheckpoint", {}).get("id", 0) >= 2,
                         what="two checkpoints", timeout=180)
    kubectl.patch_job(kube_namespace, "fresh",
                      {"spec": {"job": {"args": {"output": str(tmp_path / "output-v2")}}}})
    after = fresh.until(lambda s: s.get("attempt", 0) > before["attempt"]
                        and s.get("phase") == "Running", what="the new spec to run",
                        timeout=180)
    assert after["discardedThrough"] >= 2
    pod = kube_rest.get(f"/api/v1/namespaces/{kube_namespace}/pods/{after['driverPod']}")
    assert runtime_settings_of(pod).restore == "none"
    done = fresh.until(lambda s: s.get("phase") in ("Succeeded", "Failed"),
                       what="the job to finish", timeout=300)
    assert done["phase"] == "Succeeded", done
    assert "restoredFrom" not in done, "nothing was restored"
    assert "discardedThrough" not in done, "its own checkpoints restore from now on"
    # The new spec read every record from the start, into its own output.
    problems = verify(read_output(tmp_path / "output-v2"), count=6_000)
    assert problems == [], problems[:5]
