"""pytest fixtures for scenarios on a real node (marker ``realnode``).

- ``real_cluster`` (session): a control plane of its own (so no pod can land on the
  process node of the other tests) with one real node, the project's images
  imported, and cluster DNS. Under ``CI=true`` anything missing fails the tests; on
  a developer's machine without root or the binaries they are skipped with the
  reason.
- ``real_namespace`` (function): a fresh namespace on that cluster, deleted after.

When a test that uses the real cluster fails, the component logs, the node's pod
logs and a dump of the namespace are saved under ``e2e/logs/<test>/``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.controlplane.binaries import ALL_BINARIES
from e2e.controlplane.controlplane import ControlPlane
from e2e.controlplane.namespaces import (
    create_test_namespace,
    delete_namespace,
    wait_for_default_service_account,
)
from e2e.controlplane.pytest_plugin import (
    logs_folder,
    namespace_name_for,
    require_binaries,
    unavailable,
    write_namespace_dump,
)
from e2e.controlplane.rest import RestClient
from e2e.realnode.node import NODE_IP, ImageArchive, RealNode, missing_host_tools
from e2e.realnode.scenario import RESTRICTED

_NAMESPACE_KEY = pytest.StashKey[str]()
_state: dict[str, Any] = {}


@dataclass(frozen=True)
class RealCluster:
    """The running cluster a scenario talks to."""

    plane: ControlPlane
    node: RealNode
    bin_dir: Path
    runtime_image: str
    operator_image: str

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    def rest(self) -> RestClient:
        return self.plane.admin_rest()

    def kill_container(self, pod: dict[str, Any]) -> None:
        """SIGKILL the pod's container through the node's containerd (``ctr``)."""
        from e2e.realnode.scenario import kill_container

        kill_container(self.node.ctr, pod)


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[RealCluster]:
    if os.geteuid() != 0:
        unavailable("a real node needs root (network namespaces, mounts, cgroups)")
    missing = missing_host_tools()
    if missing:
        unavailable(f"a real node needs {', '.join(missing)} (see e2e/realnode/README.md)")
    bin_dir = require_binaries(ALL_BINARIES)
    from e2e.images import build_images

    built = build_images(log=lambda line: print(line, flush=True))
    plane = ControlPlane(bin_dir=bin_dir, node_ip=NODE_IP)
    node: RealNode | None = None
    try:
        plane.start()
        _state["plane"] = plane
        node = RealNode(
            control_plane=plane,
            bin_dir=bin_dir,
            images=[
                ImageArchive(tag=built.runtime.tag, path=built.runtime.archive),
                ImageArchive(tag=built.operator.tag, path=built.operator.archive),
            ],
            log=lambda line: print(line, flush=True),
        )
        node.start()
        _state["node"] = node
        yield RealCluster(
            plane=plane,
            node=node,
            bin_dir=bin_dir,
            runtime_image=built.runtime.tag,
            operator_image=built.operator.tag,
        )
    finally:
        _state.clear()
        if node is not None:
            node.stop()
        plane.stop()


@pytest.fixture
def real_namespace(request: pytest.FixtureRequest, real_cluster: RealCluster) -> Iterator[str]:
    rest = real_cluster.rest()
    name = namespace_name_for(request.node.name)
    create_test_namespace(rest, name)
    request.node.stash[_NAMESPACE_KEY] = name
    wait_for_default_service_account(rest, name)
    try:
        yield name
    finally:
        delete_namespace(rest, name)




@pytest.fixture
def restricted_namespace(real_namespace: str, real_cluster: RealCluster) -> str:
    """A test namespace whose pods must all meet Pod Security "restricted"."""
    real_cluster.rest().request(
        "PATCH", f"/api/v1/namespaces/{real_namespace}",
        body={"metadata": {"labels": RESTRICTED}},
        content_type="application/merge-patch+json",
    )
    return real_namespace


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed and "node" in _state:
        try:
            saved = save_failure_logs(item=item)
            report.sections.append(("real node logs", f"saved to {saved}"))
        except Exception as exc:  # never hide the test's own failure
            report.sections.append(("real node logs", f"could not save logs: {exc!r}"))
    return report


def save_failure_logs(*, item: pytest.Item) -> Path:
    """Copy what explains a failure to ``e2e/logs/<test>/``: the control plane's and
    the node's logs, every container's log, and a dump of the test's namespace."""
    target = logs_folder(item)
    plane: ControlPlane = _state["plane"]
    node: RealNode = _state["node"]
    shutil.copytree(plane.log_dir, target / "components", dirs_exist_ok=True)
    shutil.copytree(node.log_dir, target / "node", dirs_exist_ok=True)
    if node.pod_logs_dir.exists():
        shutil.copytree(node.pod_logs_dir, target / "pods", dirs_exist_ok=True, symlinks=False)
    namespace = item.stash.get(_NAMESPACE_KEY, None)
    if namespace is not None:
        write_namespace_dump(plane.admin_rest(), namespace=namespace, target=target)
    return target
