"""The operator as the chart installs it, running on the process node.

The chart's Deployment starts ``python -m cjob_operator`` with the chart's
ServiceAccount; the process node runs that pod as a local process with a token of
that account, so every API call the operator makes is authorised by the chart's RBAC
and nothing else. These helpers find that pod, read its log, wait for its health
endpoint, and install the chart through a post-renderer (``helm install
--post-renderer``) when a test needs a modified rendering.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.controlplane.rest import ApiError, RestClient, quote
from e2e.controlplane.waiting import wait_for
from e2e.kind.chart import ChartRelease, helm_environment, run_command, write_values_file

HERE = Path(__file__).resolve().parent
DROP_RBAC_RULE = HERE / "drop_rbac_rule.py"
JOBS_PATH = "/apis/checkpointed.io/v1alpha1/namespaces/{namespace}/checkpointedjobs"


@dataclass
class ChartOperator:
    """The operator pod of one chart release (one replica) on the process node."""

    release: ChartRelease
    rest: RestClient
    process_node: Any

    @property
    def namespace(self) -> str:
        return self.release.namespace

    def pods(self) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={self.release.name}"
        items: list[dict[str, Any]] = self.rest.get(
            f"/api/v1/namespaces/{quote(self.namespace)}/pods",
            query={"labelSelector": selector},
        )["items"]
        return items

    def pod_name(self) -> str | None:
        pods = [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]
        return str(pods[0]["metadata"]["name"]) if pods else None

    def log_tail(self, lines: int = 60) -> str:
        """The last lines of the operator's log (what a user reads with kubectl logs)."""
        name = self.pod_name()
        if name is None:
            return "(no operator pod)"
        try:
            text = self.process_node.read_pod_log(namespace=self.namespace, name=name)
        except (OSError, KeyError, ValueError) as exc:
            return f"(operator log unreadable: {exc!r})"
        return "\n".join(str(text).splitlines()[-lines:])

    def url(self, path: str, *, port_value: str) -> str:
        port = int(self.release.values[port_value]["port"])
        return f"http://127.0.0.1:{port}{path}"

    def is_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url("/healthz", port_value="health"),
                                        timeout=3) as resp:  # fmt: skip
                return bool(resp.status == 200)
        except OSError:
            return False

    def wait_healthy(self, *, timeout: float = 120.0) -> None:
        wait_for(self.is_healthy, what="the chart's operator to answer /healthz",
                 timeout=timeout, interval=0.5)  # fmt: skip

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url("/metrics", port_value="metrics"),
                                    timeout=5) as resp:  # fmt: skip
            return str(resp.read().decode())


def install_with_post_renderer(
    release: ChartRelease, *, post_renderer_args: list[str], timeout: float = 240.0
) -> str:
    """``helm install`` the release with a Python post-renderer script and its arguments."""
    values_file = write_values_file(folder=release.home / "values", values=release.values)
    args = [str(release.helm), "install", release.name, str(release.chart_dir),
            "--namespace", release.namespace, "--values", str(values_file),
            "--post-renderer", sys.executable]  # fmt: skip
    for arg in post_renderer_args:
        args += ["--post-renderer-args", arg]
    env = helm_environment(home=release.home, kubeconfig=release.kubeconfig)
    return run_command(args, env=env, timeout=timeout)


def delete_jobs(rest: RestClient, *, namespace: str, timeout: float = 90.0) -> None:
    """Delete the namespace's CheckpointedJobs and wait until their finalizers ran.

    Must happen while the operator still runs: without it the jobs keep their
    finalizer and the namespace could never be deleted.
    """
    path = JOBS_PATH.format(namespace=quote(namespace))
    for job in rest.get(path)["items"]:
        try:
            rest.request("DELETE", f"{path}/{quote(job['metadata']['name'])}")
        except ApiError as exc:
            if exc.status != 404:
                raise
    wait_for(lambda: not rest.get(path)["items"],
             what="the CheckpointedJobs to be finalized", timeout=timeout)  # fmt: skip


def job_events(rest: RestClient, *, namespace: str, name: str) -> list[dict[str, Any]]:
    """Events whose object is the CheckpointedJob ``name``, oldest first."""
    items = rest.get(f"/api/v1/namespaces/{quote(namespace)}/events")["items"]
    mine = [e for e in items if (e.get("involvedObject") or {}).get("name") == name
            and (e.get("involvedObject") or {}).get("kind") == "CheckpointedJob"]  # fmt: skip
    mine.sort(key=lambda e: (e.get("firstTimestamp") or e.get("eventTime") or "",
                             e["metadata"]["name"]))  # fmt: skip
    return mine


def describe(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, default=str)
