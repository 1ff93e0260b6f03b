"""``kubectl cjob`` as a user runs it: through the real kubectl, which finds the plugin on
``PATH``, against a real API server, with the operator running the job's driver on the
process node. Every command that changes a job changes what the operator acts on, and
the job still ends exactly once; what a user gets wrong is one line and changes
nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from operator_live import JobWatcher, Kubectl, OperatorProcess

from e2e.controlplane.rest import quote
from e2e.jobs import RUNNING_SUM_DIR, running_sum_job
from e2e.operator_process import JOBS_PATH, SNAPSHOTS_PATH

sys.path.insert(0, str(RUNNING_SUM_DIR))
from verify import read_output, verify

VENV_BIN = Path(sys.executable).parent


class Plugin:
    """``kubectl cjob ...`` with the test's kubeconfig, as a user's shell runs it."""

    def __init__(self, *, kubectl: Kubectl, namespace: str) -> None:
        if not (VENV_BIN / "kubectl-cjob").exists():
            pytest.fail("kubectl-cjob is not installed beside this Python: run make install")
        self.kubectl = kubectl
        self.namespace = namespace
        self.env = {**os.environ,
                    "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                    "KUBECONFIG": str(kubectl.kubeconfig)}

    def __call__(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(self.kubectl.binary), "cjob", *args, "-n", self.namespace],
                              capture_output=True, text=True, timeout=timeout, check=False,
                              env=self.env)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def ok(self, *args: str) -> str:
        done = self(*args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout


def test_the_plugin_checkpoints_snapshots_suspends_resumes_scales_and_restores_a_job(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, process_node: Any,
    cjob_operator: OperatorProcess, tmp_path: Path,
) -> None:
    cjob = Plugin(kubectl=kubectl, namespace=kube_namespace)
    count = 40_000
    job = running_sum_job(name="sums", namespace=kube_namespace, work_dir=tmp_path,
                          count=count, rate=400)
    job["spec"]["checkpoint"]["interval"] = "5s"  # the manual one is not a periodic one
    assert kubectl.apply(job).returncode == 0
    sums = JobWatcher(rest=kube_rest, namespace=kube_namespace, name="sums",
                      operator=cjob_operator)
    first = sums.until(lambda s: s.get("latestCheckpoint", {}).get("id", 0) >= 1,
                       what="a first checkpoint", timeout=180)

    header, row = cjob.ok("list").splitlines()
    assert header.split()[:3] == ["NAME", "PHASE", "ATTEMPT"]
    assert row.split()[:2] == ["sums", "Running"]

    said = cjob.ok("checkpoint", "sums")
    taken = re.fullmatch(r"checkpointedjob/sums checkpoint (\d+) completed: (\S+)\n", said)
    assert taken, said
    assert int(taken.group(1)) > first["latestCheckpoint"]["id"]
    assert taken.group(2).endswith(f"/chk-{taken.group(1)}/_metadata")
    requested = sums.get()["spec"]["checkpoint"]["triggerNonce"]  # type: ignore[index]
    assert requested.startswith("kubectl-cjob-")

    retained = json.loads(cjob.ok("checkpoints", "sums", "-o", "json"))
    assert retained and [c["id"] for c in retained] == sorted(c["id"] for c in retained)
    assert cjob.ok("checkpoints", "sums").splitlines()[0].split()[:2] == ["ID", "COMPLETED"]

    # The running sums in the latest checkpoint, read by a pod built like the driver:
    # one row per key (seq % 97), each the reduce's latest record of that key.
    (reduce,) = json.loads(cjob.ok("state", "sums", "-o", "json"))
    rows = json.loads(cjob.ok("state", "sums", "--operator", reduce["operator"], "-o", "json"))
    assert 0 < len(rows) <= 97
    assert all(r["state"] == "value" and r["value"]["key"] == r["key"] for r in rows), rows[:3]
    table = cjob.ok("state", "sums", "--operator", reduce["operator"], "--limit", "3")
    assert table.splitlines()[0].split() == ["KEY_GROUP", "KEY", "STATE", "VALUE"]
    assert len(table.splitlines()) == 1 + min(3, len(rows)) + (len(rows) > 3)
    assert not kubectl.run("get", "pods", "-n", kube_namespace, "-l",
                           "checkpointed.io/role=state", "-o", "name").stdout.strip()

    status = cjob.ok("status", "sums")
    assert re.search(r"^Phase:\s+Running", status, re.MULTILINE), status
    assert re.search(r"^Namespace:\s+" + re.escape(kube_namespace), status, re.MULTILINE)
    assert "CheckpointRequested" in status.split("Events:")[1]
    data = json.loads(cjob.ok("status", "sums", "-o", "json"))
    assert data["status"]["phase"] == "Running"
    assert any(e["reason"] == "CheckpointRequested" for e in data["events"])

    said = cjob.ok("snapshot", "sums", "--name", "keep")
    assert said.startswith("checkpointedjobsnapshot/keep completed: checkpoint "), said
    snapshot = kube_rest.get(f"{SNAPSHOTS_PATH.format(namespace=quote(kube_namespace))}/keep")
    assert snapshot["status"]["state"] == "Completed"
    assert snapshot["status"]["path"] in said

    said = cjob.ok("suspend", "sums")
    assert re.fullmatch(r"checkpointedjob/sums suspended at checkpoint \d+\n", said), said
    assert sums.status()["phase"] == "Suspended"
    refused = cjob("checkpoint", "sums")
    assert refused.returncode == 1
    assert refused.stderr.strip() == ("kubectl cjob: error: CheckpointedJob sums is "
                                      "Suspended: a checkpoint is taken only while it runs "
                                      "(kubectl cjob resume first)")
    assert sums.get()["spec"]["checkpoint"]["triggerNonce"] == requested  # type: ignore[index]
    assert cjob.ok("suspend", "sums") == "checkpointedjob/sums is suspended already\n"

    said = cjob.ok("resume", "sums")
    assert re.fullmatch(r"checkpointedjob/sums resumed, attempt \d+ from checkpoint \d+\n",
                        said), said

    said = cjob.ok("scale", "sums", "1")
    assert said.startswith("checkpointedjob/sums scaled to 1, attempt "), said
    scaled = sums.get()
    assert scaled["spec"]["parallelism"] == 1  # type: ignore[index]
    assert scaled["status"]["parallelism"] == 1  # type: ignore[index]

    # Back to the snapshot: the files sink withdraws what checkpoints after it committed,
    # so the output below is still exactly once.
    kept = snapshot["status"]["checkpointId"]
    said = cjob.ok("restore", "sums", "--from", "keep")
    assert re.fullmatch(rf"checkpointedjob/sums restored checkpoint {kept} \(\S+\) in "
                        rf"attempt \d+\n", said), said
    redeployed = sums.status()
    assert redeployed["lastRedeployNonce"].startswith("kubectl-cjob-")
    assert any(e["reason"] == "Redeployed" for e in sums.events())

    log = cjob.ok("logs", "sums", "--tail", "20")
    assert 0 < len(log.splitlines()) <= 20

    done = sums.until(lambda s: s.get("phase") in ("Succeeded", "Failed"),
                      what="the job to finish", timeout=400)
    assert done["phase"] == "Succeeded", done
    problems = verify(read_output(tmp_path / "output"), count=count)
    assert problems == [], problems[:5]


def test_mistakes_are_one_line_and_change_nothing(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, cjob_crd: None,
    tmp_path: Path,
) -> None:
    """No operator runs: the objects stay as the test writes them."""
    cjob = Plugin(kubectl=kubectl, namespace=kube_namespace)
    missing = cjob("status", "ghost")
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        f"kubectl cjob: error: no CheckpointedJob 'ghost' in namespace '{kube_namespace}' "
        f"(kubectl cjob list -n {kube_namespace})")

    job = running_sum_job(name="idle", namespace=kube_namespace, work_dir=tmp_path,
                          count=10, rate=10)
    assert kubectl.apply(job).returncode == 0
    path = f"{JOBS_PATH.format(namespace=quote(kube_namespace))}/idle"
    before = kube_rest.get(path)

    no_checkpoint = cjob("snapshot", "idle")
    assert no_checkpoint.returncode == 1
    assert no_checkpoint.stderr.strip() == ("kubectl cjob: error: CheckpointedJob idle has "
                                            "no retained checkpoint to copy yet")
    snapshots = kube_rest.get(SNAPSHOTS_PATH.format(namespace=quote(kube_namespace)))
    assert snapshots["items"] == []

    bad_name = cjob("snapshot", "idle", "--name", "Not_A_Name")
    assert bad_name.returncode == 2
    assert "a snapshot's name is lower-case letters" in bad_name.stderr

    too_wide = cjob("scale", "idle", "500")
    assert too_wide.returncode == 2
    assert too_wide.stderr.strip().endswith("is above the job's maxParallelism 128 (its key "
                                            "groups); a job cannot run more subtasks than "
                                            "key groups")

    for point, code, words in (
            ("99", 1, "retains no checkpoint 99 (it retains none)"),
            ("gone", 1, "no CheckpointedJobSnapshot 'gone'"),
            ("ftp://host/x", 2, "a path is file:// or s3://")):
        refused = cjob("restore", "idle", "--from", point)
        assert refused.returncode == code, refused.stderr
        assert words in refused.stderr

    kube_rest.request("PATCH", f"{path}/status", body={"status": {"phase": "Failed"}},
                      content_type="application/merge-patch+json")
    failed = cjob("checkpoint", "idle")
    assert failed.returncode == 1
    assert failed.stderr.strip() == ("kubectl cjob: error: CheckpointedJob idle is Failed: "
                                     "a checkpoint is taken only while it runs")
    no_driver = cjob("logs", "idle")
    assert no_driver.returncode == 1
    assert "has no driver pod now (it is Failed)" in no_driver.stderr

    after = kube_rest.get(path)
    assert after["spec"] == before["spec"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"]


def test_kubectl_completes_the_plugins_commands_and_job_names(
    kubectl: Kubectl, kube_namespace: str, cjob_crd: None, tmp_path: Path,
) -> None:
    cjob = Plugin(kubectl=kubectl, namespace=kube_namespace)
    job = running_sum_job(name="completed-one", namespace=kube_namespace, work_dir=tmp_path,
                          count=10, rate=10)
    assert kubectl.apply(job).returncode == 0

    def complete(*words: str) -> list[str]:
        done = subprocess.run([str(kubectl.binary), "__complete", "cjob", *words],
                              capture_output=True, text=True, timeout=60, check=False,
                              env=cjob.env)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert complete("chec")[:2] == ["checkpoints", "checkpoint"]
    assert complete("status", "-n", kube_namespace, "comp")[0] == "completed-one"
