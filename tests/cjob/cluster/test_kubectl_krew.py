"""``kubectl cjob`` installed the krew way: the archive ``scripts/krew_package.py``
builds, installed by a real krew with the manifest written from ``krew/cjob.yaml``, then
run through the real kubectl with the machine's own ``python3`` and nothing of the
project's virtualenv on ``PATH``: the archive carries every library the plugin needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_live import Kubectl

from e2e.controlplane.pytest_plugin import require_binaries
from e2e.jobs import running_sum_job
from e2e.repo import REPO_ROOT

PACKAGER = REPO_ROOT / "scripts" / "krew_package.py"


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The archive and its manifest, the archive's address a file:// URI."""
    out = tmp_path_factory.mktemp("krew-dist")
    archive = out / "kubectl-cjob.tar.gz"
    built = subprocess.run([sys.executable, str(PACKAGER), "--out", str(out),
                            "--uri", archive.as_uri()],
                           capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    made, manifest = (Path(line) for line in built.stdout.split())
    made.rename(archive)
    return archive, manifest


def krew_env(root: Path, *, kubeconfig: Path, kubectl: Path) -> dict[str, str]:
    """A user's environment: the system's programs, kubectl and krew's links, and no
    virtualenv (``python3`` is the machine's)."""
    return {"HOME": str(root / "home"), "KREW_ROOT": str(root / "krew"),
            "KUBECONFIG": str(kubeconfig),
            "PATH": os.pathsep.join([str(root / "krew" / "bin"), str(kubectl.parent),
                                     "/usr/local/bin", "/usr/bin", "/bin"])}


def test_krew_installs_the_archive_and_kubectl_runs_the_plugin_on_the_systems_python(
    package: tuple[Path, Path], kubectl: Kubectl, kube_rest: Any, kube_namespace: str,
    cjob_crd: None, tmp_path: Path,
) -> None:
    archive, manifest = package
    plugin = yaml.safe_load(manifest.read_text())
    assert plugin["kind"] == "Plugin" and plugin["metadata"]["name"] == "cjob"
    assert plugin["spec"]["version"].startswith("v")
    krew = require_binaries(("krew",)) / "krew"
    env = krew_env(tmp_path, kubeconfig=kubectl.kubeconfig, kubectl=kubectl.binary)
    (tmp_path / "home").mkdir()

    installed = subprocess.run(
        [str(krew), "install", f"--manifest={manifest}", f"--archive={archive}"],
        capture_output=True, text=True, timeout=120, check=False, env=env,
        stdin=subprocess.DEVNULL)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "Installed plugin: cjob" in installed.stdout + installed.stderr

    assert kubectl.apply(running_sum_job(name="sums", namespace=kube_namespace,
                                         work_dir=tmp_path, count=10, rate=10)
                         ).returncode == 0

    def cjob(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(kubectl.binary), "cjob", *args, "-n", kube_namespace],
                              capture_output=True, text=True, timeout=60, check=False,
                              env=env)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    listed = cjob("list")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split()[:2] == ["NAME", "PHASE"] and row.split()[0] == "sums"
    missing = cjob("status", "nope")
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        f"kubectl cjob: error: no CheckpointedJob 'nope' in namespace '{kube_namespace}' "
        f"(kubectl cjob list -n {kube_namespace})"]

    # An archive that is not the one the manifest names is refused, and nothing of it
    # is installed (krew's own uninstall needs its index, which is fetched online).
    other = tmp_path / "other"
    (other / "home").mkdir(parents=True)
    tampered = tmp_path / "tampered.yaml"
    tampered.write_text(manifest.read_text().replace(
        plugin["spec"]["platforms"][0]["sha256"], "0" * 64))
    refused = subprocess.run(
        [str(krew), "install", f"--manifest={tampered}", f"--archive={archive}"],
        capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
        env=krew_env(other, kubeconfig=kubectl.kubeconfig, kubectl=kubectl.binary))
    assert refused.returncode != 0
    assert f"checksum does not match, want: {'0' * 64}" in refused.stdout + refused.stderr
    assert not (other / "krew" / "bin" / "kubectl-cjob").exists()
