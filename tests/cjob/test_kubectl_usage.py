"""``kubectl cjob`` mistakes on the command line and in the kubeconfig: one line, exit 2
for usage and 1 for what cannot be reached, before anything is asked of a cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml


def plugin(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cjob.kubectl", *args], capture_output=True,
                          text=True, timeout=60, check=False, env=env)


@pytest.mark.parametrize("args, said", [
    (["scale", "clicks", "0"], "must be at least 1"),
    (["scale", "clicks", "two"], "not a whole number"),
    (["checkpoint", "clicks", "--timeout", "soon"], "must be a duration"),
    (["status", "clicks", "-o", "wide"], "invalid choice"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
])
def test_a_usage_mistake_exits_2_with_one_error_line(args: list[str], said: str) -> None:
    done = plugin(*args)
    assert done.returncode == 2
    assert said in done.stderr
    assert "Traceback" not in done.stderr
    assert [line for line in done.stderr.splitlines() if "error:" in line] == [
        line for line in done.stderr.splitlines()[-1:]]


def test_a_missing_kubeconfig_or_context_is_said_in_one_line(tmp_path: Path) -> None:
    done = plugin("list", "--kubeconfig", str(tmp_path / "none"))
    assert done.returncode == 1
    assert done.stderr.strip() == (f"kubectl cjob: error: --kubeconfig {tmp_path / 'none'}: "
                                   f"no such file")
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "me"}}]}))
    done = plugin("--context", "prod", "list", "--kubeconfig", str(config))
    assert done.returncode == 1
    assert done.stderr.strip() == ("kubectl cjob: error: --context prod: no such context in "
                                   "the kubeconfig (it has: lab)")


def test_an_unreachable_api_server_is_one_line_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "me",
                                                  "namespace": "jobs"}}]}))
    done = plugin("status", "clicks", "--kubeconfig", str(config))
    assert done.returncode == 1
    assert done.stderr.startswith("kubectl cjob: error: get CheckpointedJob clicks: cannot "
                                  "reach the API server at http://127.0.0.1:9")
    assert len(done.stderr.splitlines()) == 1
