"""Fixtures for the operator against the local control plane and the process node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_live import JOBS_PATH, Kubectl, OperatorProcess, install_crd

from e2e.controlplane.binaries import find_bin_dir
from e2e.controlplane.pytest_plugin import require_binaries
from e2e.controlplane.rest import quote
from e2e.controlplane.waiting import wait_for


@pytest.fixture(scope="session")
def cjob_crd(kube_rest: Any) -> None:
    install_crd(kube_rest)


@pytest.fixture(scope="session")
def kubectl(control_plane: Any) -> Kubectl:
    require_binaries(("kubectl",))
    return Kubectl(binary=find_bin_dir() / "kubectl", kubeconfig=control_plane.kubeconfig)


@pytest.fixture
def cjob_operator(
    control_plane: Any,
    process_node: Any,
    kube_rest: Any,
    kube_namespace: str,
    cjob_crd: None,
    tmp_path: Path,
) -> Iterator[OperatorProcess]:
    """The operator watching the test's namespace; its jobs are deleted before it stops."""
    operator = OperatorProcess(namespace=kube_namespace, kubeconfig=control_plane.kubeconfig,
                               log_file=tmp_path / "operator.log")
    operator.start()
    try:
        yield operator
    finally:
        path = JOBS_PATH.format(namespace=quote(kube_namespace))
        try:
            for job in kube_rest.get(path)["items"]:
                kube_rest.request("DELETE", f"{path}/{quote(job['metadata']['name'])}")
            wait_for(lambda: not kube_rest.get(path)["items"],
                     what="the test's CheckpointedJobs to be finalized", timeout=90)
        except Exception as exc:  # never hide the test's own result
            print(f"cleanup of {kube_namespace} incomplete: {exc}")
        finally:
            operator.stop()
