"""The README's cluster quick start, and then its snapshot workflow ("Changing a running
job"), run as written against the real node.

``make cluster`` itself would start a second node on this machine, so the session's
cluster stands in for it: the same operator install, S3 server, bucket, Secret and
files (``scenario.prepare_quick_start`` is what ``make cluster`` calls). Every
other command of the README's block runs unchanged in bash, the verifier included.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from e2e.kind.chart import ChartRelease
from e2e.realnode import scenario
from e2e.realnode.cluster_s3 import ClusterS3
from e2e.realnode.pytest_plugin import RealCluster
from e2e.repo import REPO_ROOT

pytestmark = [
    pytest.mark.timeout(1800),
]

README = REPO_ROOT / "README.md"
BEGIN = "<!-- cluster-quick-start -->"
END = "<!-- end cluster-quick-start -->"
CHANGES = ("<!-- cluster-changes -->", "<!-- end cluster-changes -->")
STATE_DIR = ".cjob/cluster"


def block_commands(begin: str = BEGIN, end: str = END) -> list[str]:
    """The shell lines of one of the README's marked blocks."""
    text = README.read_text()
    assert begin in text and end in text, f"the README lost its block {begin}"
    block = text.split(begin, 1)[1].split(end, 1)[0]
    lines = block.strip().splitlines()
    assert lines[0].startswith("```sh") and lines[-1] == "```"
    return [line for line in lines[1:-1] if line.strip()]


def quick_start_commands() -> list[str]:
    """The shell lines of the README's cluster quick start block."""
    return block_commands()


def test_the_quick_start_block_starts_with_make_cluster_and_uses_its_files() -> None:
    commands = quick_start_commands()
    assert commands[0] == "make cluster"
    assert any(f"{STATE_DIR}/kubeconfig" in c for c in commands)
    assert any(f"{STATE_DIR}/s3.env" in c for c in commands)


def test_the_readme_cluster_quick_start_runs_as_written(
    real_cluster: RealCluster,
    operator: ChartRelease,
    cluster_s3: ClusterS3,
    kubectl: scenario.Kubectl,
    tmp_path: Path,
) -> None:
    rest = real_cluster.rest()
    state_dir = tmp_path / "cluster"
    scenario.prepare_quick_start(
        rest=rest, s3=cluster_s3, state_dir=state_dir, kubeconfig=real_cluster.kubeconfig
    )
    # The session's cluster stands in for `make cluster`; the snapshot workflow follows
    # in the same shell, as the README says.
    commands = quick_start_commands()[1:] + block_commands(*CHANGES)
    script = "\n".join(["set -euo pipefail", *commands]).replace(STATE_DIR, str(state_dir))
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    try:
        proc = subprocess.run(
            ["bash", "-c", script],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
        job = scenario.JobHandle(rest=rest, namespace="default", name="running-sum-v2")
        assert proc.returncode == 0, (
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n{job.describe()}"
        )
        assert proc.stdout.count("verdict: output exactly-once") == 2, proc.stdout[-3000:]
        again = scenario.JobHandle(rest=rest, namespace="default", name="running-sum-v2")
        status = again.status()
        assert status.get("phase") == "Succeeded"
        assert "/snapshots/before-v2-" in status["restoredFrom"]["path"]
    finally:
        # The jobs and the snapshot first: the snapshot's disposal runs a pod of the job.
        kubectl("delete", "--namespace", "default", "--ignore-not-found", "--wait=true",
                "checkpointedjob/running-sum", "checkpointedjob/running-sum-v2",
                "checkpointedjobsnapshot/before-v2", timeout=180)  # fmt: skip
        kubectl("delete", "--namespace", "default", "--ignore-not-found",
                "configmap/running-sum-code", timeout=60)  # fmt: skip
