"""Helpers for running the operator against the local control plane.

The operator runs as a real subprocess (``python -m cjob_operator``) with the admin
kubeconfig; jobs are applied with ``kubectl`` like a user would; driver pods run on
the process node as local processes sharing this machine's file system.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from paths import REPO

from e2e.controlplane.rest import ApiError, RestClient, quote
from e2e.controlplane.waiting import wait_for
from e2e.operator_process import JOBS_PATH, OperatorProcess, install_crd

__all__ = ["JOBS_PATH", "JobWatcher", "Kubectl", "OperatorProcess", "install_crd",
           "install_kopf_peering", "running_operator"]


@contextmanager
def running_operator(*, rest: RestClient, namespace: str, kubeconfig: Path,
                     log_file: Path) -> Iterator[OperatorProcess]:
    """The operator watching ``namespace`` for the block; the namespace's jobs are
    deleted (and their finalizers run by this operator) before it stops, so the next
    test does not find another test's job still being torn down."""
    operator = OperatorProcess(namespace=namespace, kubeconfig=kubeconfig, log_file=log_file)
    operator.start()
    try:
        yield operator
    finally:
        path = JOBS_PATH.format(namespace=quote(namespace))
        try:
            for job in rest.get(path)["items"]:
                rest.request("DELETE", f"{path}/{quote(job['metadata']['name'])}")
            wait_for(lambda: not rest.get(path)["items"],
                     what="the test's CheckpointedJobs to be finalized", timeout=90)
        except Exception as exc:  # never hide the test's own result
            print(f"cleanup of {namespace} incomplete: {exc}")
        finally:
            operator.stop()



class Kubectl:
    def __init__(self, *, binary: Path, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def apply(self, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", stdin=yaml.safe_dump(manifest))

    def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        done = self.run("-n", namespace, "patch", "checkpointedjob", name, "--type", "merge",
                        "-p", json.dumps(patch))
        assert done.returncode == 0, done.stderr


KOPF_PEERING_CRDS = REPO / "charts" / "checkpointed-jobs" / "crds" / "kopf-peerings.yaml"


def install_kopf_peering(rest: RestClient, *, namespace: str, name: str) -> None:
    """kopf's peering CRDs (as the chart ships them) and one KopfPeering object."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd in yaml.safe_load_all(KOPF_PEERING_CRDS.read_text()):
        if not crd:
            continue
        try:
            rest.request("POST", path, body=crd)
        except ApiError as exc:
            if exc.status != 409:
                raise
    wait_for(lambda: _served(rest, f"/apis/kopf.dev/v1/namespaces/{quote(namespace)}/kopfpeerings"),
             what="the KopfPeering CRD to be served", timeout=60)
    rest.request("POST", f"/apis/kopf.dev/v1/namespaces/{quote(namespace)}/kopfpeerings",
                 body={"apiVersion": "kopf.dev/v1", "kind": "KopfPeering",
                       "metadata": {"name": name}})


def _served(rest: RestClient, path: str) -> bool:
    try:
        rest.get(path)
        return True
    except ApiError:
        return False


class JobWatcher:
    """Reads a CheckpointedJob and its Events; waits for conditions on them."""

    def __init__(
        self, *, rest: RestClient, namespace: str, name: str, operator: OperatorProcess
    ) -> None:
        self.rest = rest
        self.namespace = namespace
        self.name = name
        self.operator = operator

    def get(self) -> dict[str, Any] | None:
        try:
            job: dict[str, Any] = self.rest.get(
                f"{JOBS_PATH.format(namespace=quote(self.namespace))}/{quote(self.name)}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return job

    def status(self) -> dict[str, Any]:
        job = self.get()
        return dict((job or {}).get("status") or {})

    def until(
        self, check: Callable[[dict[str, Any]], bool], *, what: str, timeout: float = 120.0
    ) -> dict[str, Any]:
        """Wait until ``check(status)`` holds; fail with the status and the operator log."""
        started = time.monotonic()
        deadline = started + timeout
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status = self.status()
            if check(status):
                print(f"{self.name}: {what} after {time.monotonic() - started:.1f}s")
                return status
            time.sleep(0.5)
        raise AssertionError(
            f"timed out after {timeout:.0f}s waiting for {what}\n"
            f"status: {json.dumps(status, indent=1)}\n"
            f"events: {self.event_reasons()}\n"
            f"operator log:\n{self.operator.log_tail()}"
        )

    def events(self) -> list[dict[str, Any]]:
        items = self.rest.get(f"/api/v1/namespaces/{quote(self.namespace)}/events")["items"]
        mine = [e for e in items if e.get("involvedObject", {}).get("name") == self.name
                and e.get("involvedObject", {}).get("kind") == "CheckpointedJob"]
        mine.sort(key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["name"]))
        return mine

    def event_reasons(self) -> list[str]:
        return [str(event.get("reason")) for event in self.events()]

    def pod_names(self) -> list[str]:
        pods = self.rest.get(
            f"/api/v1/namespaces/{quote(self.namespace)}/pods"
            f"?labelSelector=checkpointed.io/job%3D{quote(self.name)}")["items"]
        return sorted(p["metadata"]["name"] for p in pods)

    def configmap(self) -> dict[str, Any] | None:
        try:
            cm: dict[str, Any] = self.rest.get(
                f"/api/v1/namespaces/{quote(self.namespace)}/configmaps/"
                f"{quote(self.name)}-checkpoints")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return cm
