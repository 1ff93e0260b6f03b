"""The built toolset agrees on one Kubernetes version, and kwok and the CLI work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from e2e.controlplane import (
    KWOK_TOLERATION,
    ControlPlane,
    KwokNodes,
    ProcessNode,
    RestClient,
    read_versions,
)
from e2e.controlplane.pytest_plugin import REPO_ROOT, require_binaries
from e2e.controlplane.waiting import wait_for_pod_gone, wait_for_pod_phase


def test_the_apiserver_reports_the_pinned_version(control_plane: ControlPlane) -> None:
    version = control_plane.get_json("/version")

    assert version["gitVersion"] == read_versions().kubernetes


def test_helm_renders_charts_for_the_apiserver_minor_version(tmp_path: Path) -> None:
    bin_dir = require_binaries(("helm",))
    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\n"
        "data: {minor: {{ .Capabilities.KubeVersion.Minor | quote }}}\n"
    )

    out = subprocess.run(
        [str(bin_dir / "helm"), "template", "probe", str(chart)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout

    minor = read_versions().kubernetes.split(".")[1]
    assert f'minor: "{minor}"' in out


def test_kubectl_talks_to_the_control_plane_with_the_admin_kubeconfig(
    control_plane: ControlPlane,
) -> None:
    bin_dir = require_binaries(("kubectl",))

    out = subprocess.run(
        [str(bin_dir / "kubectl"), "--kubeconfig", str(control_plane.kubeconfig), "auth",
         "whoami", "-o", "jsonpath={.status.userInfo.groups}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout  # fmt: skip

    assert "system:masters" in out


def test_pods_on_kwok_nodes_run_without_a_process(
    kwok_nodes: KwokNodes, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
) -> None:
    kwok_nodes.add_node(name="kwok-0")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "fake"},
        "spec": {
            "nodeSelector": {"type": "kwok"},
            "tolerations": [KWOK_TOLERATION],
            "containers": [{"name": "main", "image": "checkpointed-jobs/test:latest"}],
        },
    }
    kube_rest.request("POST", f"/api/v1/namespaces/{kube_namespace}/pods", body=pod)

    running = wait_for_pod_phase(
        kube_rest, namespace=kube_namespace, name="fake", phases=("Running",)
    )

    assert running["spec"]["nodeName"] == "kwok-0"
    assert not process_node.has_run(namespace=kube_namespace, name="fake")
    kube_rest.request("DELETE", f"/api/v1/namespaces/{kube_namespace}/pods/fake")
    wait_for_pod_gone(kube_rest, namespace=kube_namespace, name="fake")


def test_the_cli_starts_reports_and_stops_a_control_plane(tmp_path: Path) -> None:
    require_binaries(("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    state = ["--state-dir", str(tmp_path / "state")]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "e2e.controlplane", *args, *state],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    started = cli("up")
    try:
        assert started.returncode == 0, started.stderr
        kubeconfig = Path(started.stdout.strip())
        assert kubeconfig.is_file()
        assert cli("status").returncode == 0
        nodes = subprocess.run(
            [str(require_binaries(("kubectl",)) / "kubectl"), "--kubeconfig", str(kubeconfig),
             "get", "nodes", "-o", "name"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout  # fmt: skip
        assert "node/process-node" in nodes
    finally:
        stopped = cli("down")
    assert stopped.returncode == 0, stopped.stderr
    assert cli("status").returncode == 1
