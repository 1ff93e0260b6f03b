"""Smoke test of the kind setup the chart and operator scenarios build on."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


def test_a_kind_cluster_has_a_ready_node(kind_cluster: Path) -> None:
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(kind_cluster), "get", "nodes", "-o", "json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    nodes = json.loads(out)["items"]
    ready = [
        n["metadata"]["name"]
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
    ]
    assert ready, f"no Ready node in {[n['metadata']['name'] for n in nodes]}"
