"""Render, install and remove the checkpointed-jobs Helm chart with a given helm binary.

Used by the chart's tests against the local control plane (``tests/charts``), by the
operator's end-to-end scenarios (through :mod:`e2e.kind.chart_fixtures`) and by the
kind scenario. Plain subprocess calls: the chart is exercised exactly as a user's
``helm`` would exercise it.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.repo import REPO_ROOT

CHART_DIR = REPO_ROOT / "charts" / "checkpointed-jobs"
CHART_NAME = "checkpointed-jobs"

Manifest = dict[str, Any]


class HelmCommandError(RuntimeError):
    """A helm (or kubectl) command exited with an error; carries its output."""

    def __init__(self, *, args: Sequence[str], returncode: int, stderr: str) -> None:
        self.args_run = list(args)
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(
            f"{Path(args[0]).name} {' '.join(args[1:])} failed with exit code "
            f"{returncode}:\n{stderr.strip()}"
        )


def helm_environment(*, home: Path, kubeconfig: Path | None = None) -> dict[str, str]:
    """The environment of a helm call: its caches and settings under ``home``.

    Keeping helm's state in a throwaway folder means tests neither read nor change the
    repositories and plugins of the person running them.
    """
    env = dict(os.environ)
    for kind in ("CACHE", "CONFIG", "DATA"):
        folder = home / kind.lower()
        folder.mkdir(parents=True, exist_ok=True)
        env[f"HELM_{kind}_HOME"] = str(folder)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    else:
        env.pop("KUBECONFIG", None)
    return env


def run_command(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 300.0,
) -> str:
    """Run a command and return its stdout; raise :class:`HelmCommandError` on failure."""
    proc = subprocess.run(
        [str(a) for a in args],
        input=stdin,
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else None,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise HelmCommandError(args=[str(a) for a in args], returncode=proc.returncode,
                               stderr=proc.stderr or proc.stdout)  # fmt: skip
    return proc.stdout


def write_values_file(*, folder: Path, values: Mapping[str, Any]) -> Path:
    """Write ``values`` to a fresh YAML file in ``folder`` (helm's ``-f`` input)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"values-{secrets.token_hex(4)}.yaml"
    path.write_text(yaml.safe_dump(dict(values), sort_keys=False))
    return path


def parse_manifests(text: str) -> list[Manifest]:
    """The objects of a multi-document YAML stream, without empty documents."""
    return [doc for doc in yaml.safe_load_all(text) if isinstance(doc, dict) and doc]


def render_chart(
    *,
    helm: Path,
    home: Path,
    values: Mapping[str, Any] | None = None,
    values_files: Sequence[Path] = (),
    release: str = "cjob",
    namespace: str = "cjob-system",
    include_crds: bool = False,
    chart_dir: Path = CHART_DIR,
) -> list[Manifest]:
    """``helm template`` the chart and return the rendered objects."""
    args: list[str] = [str(helm), "template", release, str(chart_dir), "--namespace", namespace]
    if include_crds:
        args.append("--include-crds")
    for path in values_files:
        args += ["--values", str(path)]
    if values:
        args += ["--values", str(write_values_file(folder=home / "values", values=values))]
    return parse_manifests(run_command(args, env=helm_environment(home=home)))


def lint_chart(
    *,
    helm: Path,
    home: Path,
    values: Mapping[str, Any] | None = None,
    values_files: Sequence[Path] = (),
    chart_dir: Path = CHART_DIR,
) -> str:
    """``helm lint --strict`` the chart; returns helm's report."""
    args: list[str] = [str(helm), "lint", "--strict", str(chart_dir)]
    for path in values_files:
        args += ["--values", str(path)]
    if values:
        args += ["--values", str(write_values_file(folder=home / "values", values=values))]
    return run_command(args, env=helm_environment(home=home))


@dataclass
class ChartRelease:
    """One release of the chart in a cluster, driven through the helm CLI."""

    name: str
    namespace: str
    helm: Path
    home: Path
    kubeconfig: Path
    values: dict[str, Any] = field(default_factory=dict)
    chart_dir: Path = CHART_DIR

    def _helm(self, *args: str, timeout: float = 300.0) -> str:
        env = helm_environment(home=self.home, kubeconfig=self.kubeconfig)
        return run_command([str(self.helm), *args], env=env, timeout=timeout)

    def install(self, *, wait: bool = False, timeout_seconds: int = 180) -> str:
        """``helm install``; with ``wait`` until the operator's Deployment is available."""
        values_file = write_values_file(folder=self.home / "values", values=self.values)
        args = ["install", self.name, str(self.chart_dir), "--namespace", self.namespace,
                "--values", str(values_file)]  # fmt: skip
        if wait:
            args += ["--wait", "--timeout", f"{timeout_seconds}s"]
        return self._helm(*args, timeout=timeout_seconds + 60)

    def upgrade(self, *, values: Mapping[str, Any], wait: bool = False,
                timeout_seconds: int = 180) -> str:  # fmt: skip
        """``helm upgrade`` with new values (they replace the previous ones)."""
        self.values = dict(values)
        values_file = write_values_file(folder=self.home / "values", values=self.values)
        args = ["upgrade", self.name, str(self.chart_dir), "--namespace", self.namespace,
                "--values", str(values_file)]  # fmt: skip
        if wait:
            args += ["--wait", "--timeout", f"{timeout_seconds}s"]
        return self._helm(*args, timeout=timeout_seconds + 60)

    def uninstall(self, *, missing_ok: bool = False, wait: bool = True) -> None:
        """``helm uninstall``; with ``missing_ok`` an absent release is not an error."""
        args = ["uninstall", self.name, "--namespace", self.namespace]
        if wait:
            args += ["--wait", "--timeout", "120s"]
        try:
            self._helm(*args, timeout=180)
        except HelmCommandError as exc:
            if missing_ok and "not found" in exc.stderr:
                return
            raise

    def status(self) -> dict[str, Any]:
        """``helm status -o json`` as a dict."""
        out = self._helm("status", self.name, "--namespace", self.namespace, "-o", "json")
        result: dict[str, Any] = json.loads(out)
        return result

    def manifest(self) -> list[Manifest]:
        """The objects of the release as helm recorded them (``helm get manifest``)."""
        return parse_manifests(
            self._helm("get", "manifest", self.name, "--namespace", self.namespace)
        )

    @property
    def fullname(self) -> str:
        """The chart's resource name prefix for this release (see ``cjob.fullname``)."""
        override = self.values.get("fullnameOverride")
        if override:
            return str(override)[:63].rstrip("-")
        name = str(self.values.get("nameOverride") or CHART_NAME)
        if name in self.name:
            return self.name[:63].rstrip("-")
        return f"{self.name}-{name}"[:63].rstrip("-")
