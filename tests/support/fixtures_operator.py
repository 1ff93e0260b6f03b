"""Fixtures for the operator against the local control plane and the process node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_live import Kubectl, OperatorProcess, install_crd, running_operator

from e2e.controlplane.binaries import find_bin_dir
from e2e.controlplane.pytest_plugin import require_binaries


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
    with running_operator(rest=kube_rest, namespace=kube_namespace,
                          kubeconfig=control_plane.kubeconfig,
                          log_file=tmp_path / "operator.log") as operator:
        yield operator
