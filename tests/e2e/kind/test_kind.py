"""The whole-system kind scenario (run.sh): images, chart, MinIO, a driver killed mid-run,
recovery from the latest checkpoint and exactly-once output. Needs Docker and kind;
skipped with the reason where they are missing."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from paths import REPO

from e2e.controlplane.binaries import find_bin_dir
from e2e.kind.availability import kind_unavailable_reason

RUN_SCRIPT = REPO / "e2e" / "kind" / "run.sh"


def scenario_path() -> str:
    """PATH for run.sh: kubectl and helm from the local toolset when not installed."""
    path = os.environ.get("PATH", "")
    bin_dir = find_bin_dir()
    if bin_dir.is_dir():
        path = f"{path}{os.pathsep}{bin_dir}"
    return path


@pytest.mark.timeout(3600)
def test_a_killed_driver_restarts_from_its_checkpoint_with_exactly_once_output() -> None:
    reason = kind_unavailable_reason()
    if reason is not None:
        pytest.skip(f"the kind scenario needs Docker and kind: {reason}")
    path = scenario_path()
    missing = [tool for tool in ("kubectl", "helm") if shutil.which(tool, path=path) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not found; run e2e/controlplane/build.sh")
    proc = subprocess.run(
        ["bash", str(RUN_SCRIPT)],
        env={**os.environ, "PATH": path, "CJOB_KIND_CLUSTER": "cjob-e2e-pytest"},
        capture_output=True,
        text=True,
        timeout=3500,
        check=False,
    )
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    assert "PASSED" in proc.stderr and "output exactly-once" in proc.stderr, tail
