"""pytest fixtures for tests against the local control plane.

Enable with ``pytest_plugins = ["e2e.controlplane.pytest_plugin"]`` in the root
``conftest.py``. Fixtures:

- ``control_plane`` (session): a running :class:`ControlPlane` (etcd, apiserver,
  scheduler, controller-manager); the apiserver audits the requests of
  ``audit.OPERATOR_USER``, so a test can count what an operator with that identity sent. Skipped when the binaries are not built, except
  under ``CI=true``, where a missing binary fails the test instead.
- ``process_node`` (session): a Ready :class:`ProcessNode` that runs pods as processes.
- ``kube_rest`` (session): an admin :class:`RestClient` (standard library only).
- ``kube_api_client`` (session): an admin ``kubernetes.client.ApiClient``.
- ``kube_namespace`` (function): a fresh namespace whose ``default`` service account
  exists; deleted after the test.
- ``kwok_nodes`` (session): a running :class:`KwokNodes`.

When a test that uses the control plane fails, the component logs, the process node's
pod logs and a dump of the test's namespace are copied to ``e2e/logs/<test>/``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from e2e.controlplane.audit import OPERATOR_USER
from e2e.controlplane.binaries import (
    CONTROL_PLANE_BINARIES,
    find_bin_dir,
    missing_binaries,
)
from e2e.controlplane.controlplane import ControlPlane
from e2e.controlplane.kwok import KwokNodes
from e2e.controlplane.namespaces import (
    create_test_namespace,
    delete_namespace,
    wait_for_default_service_account,
)
from e2e.controlplane.process_node import ProcessNode
from e2e.controlplane.rest import ApiError, RestClient, quote
from e2e.repo import REPO_ROOT

LOGS_ROOT = REPO_ROOT / "e2e" / "logs"

_NAMESPACE_KEY = pytest.StashKey[str]()
_state: dict[str, Any] = {}


def is_ci() -> bool:
    """Whether we run in CI, where missing binaries are an error, not a skip."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(message: str) -> NoReturn:
    """Skip the test for a missing prerequisite, or fail it under CI (where nothing may
    be missing)."""
    if is_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def require_binaries(names: tuple[str, ...]) -> Path:
    """The bin dir, or skip (fail in CI) with a message saying how to build it."""
    bin_dir = find_bin_dir()
    missing = missing_binaries(bin_dir=bin_dir, names=names)
    if missing:
        message = (
            f"control plane binaries not built ({', '.join(missing)} missing in {bin_dir}); "
            "run e2e/controlplane/build.sh"
        )
        unavailable(message)
    return bin_dir


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    bin_dir = require_binaries(CONTROL_PLANE_BINARIES)
    plane = ControlPlane(bin_dir=bin_dir, audited_users=(OPERATOR_USER,))
    plane.start()
    _state["control_plane"] = plane
    try:
        yield plane
    finally:
        _state.pop("control_plane", None)
        plane.stop()


@pytest.fixture(scope="session")
def process_node(control_plane: ControlPlane) -> Iterator[ProcessNode]:
    node = ProcessNode(control_plane=control_plane)
    node.start()
    _state["process_node"] = node
    try:
        node.wait_until_ready(timeout=120)
        yield node
    finally:
        _state.pop("process_node", None)
        node.stop()
        node.cleanup_work_dir()


@pytest.fixture(scope="session")
def kwok_nodes(control_plane: ControlPlane) -> Iterator[KwokNodes]:
    bin_dir = require_binaries(("kwok",))
    kwok = KwokNodes(control_plane=control_plane, bin_dir=bin_dir)
    kwok.start()
    try:
        yield kwok
    finally:
        kwok.stop()


@pytest.fixture(scope="session")
def kube_rest(control_plane: ControlPlane) -> RestClient:
    return control_plane.admin_rest()


@pytest.fixture(scope="session")
def kube_api_client(control_plane: ControlPlane) -> Iterator[Any]:
    client = control_plane.new_api_client()
    try:
        yield client
    finally:
        client.close()


def namespace_name_for(test_name: str) -> str:
    """A valid, unique namespace name derived from a test's name."""
    base = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:45].strip("-")
    return f"t-{base}-{secrets.token_hex(3)}"


@pytest.fixture
def kube_namespace(request: pytest.FixtureRequest, kube_rest: RestClient) -> Iterator[str]:
    name = namespace_name_for(request.node.name)
    create_test_namespace(kube_rest, name)
    request.node.stash[_NAMESPACE_KEY] = name
    wait_for_default_service_account(kube_rest, name)
    try:
        yield name
    finally:
        delete_namespace(kube_rest, name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed and "control_plane" in _state:
        try:
            saved = save_failure_logs(item=item)
            report.sections.append(("control plane logs", f"saved to {saved}"))
        except Exception as exc:  # never hide the test's own failure
            report.sections.append(("control plane logs", f"could not save logs: {exc!r}"))
    return report


def save_failure_logs(*, item: pytest.Item) -> Path:
    """Copy what explains a failure to ``e2e/logs/<test>/`` (a git-ignored folder)."""
    target = logs_folder(item)
    plane: ControlPlane = _state["control_plane"]
    shutil.copytree(plane.log_dir, target / "components", dirs_exist_ok=True)
    node: ProcessNode | None = _state.get("process_node")
    if node is not None:
        if node.node_log_file.exists():
            shutil.copy(node.node_log_file, target / "process-node.log")
        if node.pods_dir.exists():
            shutil.copytree(
                node.pods_dir,
                target / "pods",
                ignore=shutil.ignore_patterns("token", "kubeconfig", "work"),
                dirs_exist_ok=True,
            )
    namespace = item.stash.get(_NAMESPACE_KEY, None)
    if namespace is not None:
        write_namespace_dump(plane.admin_rest(), namespace=namespace, target=target)
    return target


NAMESPACE_DUMP = (
    ("pods", "/api/v1/namespaces/{ns}/pods"),
    ("events", "/api/v1/namespaces/{ns}/events"),
    ("configmaps", "/api/v1/namespaces/{ns}/configmaps"),
    ("services", "/api/v1/namespaces/{ns}/services"),
    ("deployments", "/apis/apps/v1/namespaces/{ns}/deployments"),
    ("jobs", "/apis/batch/v1/namespaces/{ns}/jobs"),
    ("checkpointedjobs", "/apis/checkpointed.io/v1alpha1/namespaces/{ns}/checkpointedjobs"),
)


def write_namespace_dump(rest: RestClient, *, namespace: str, target: Path) -> None:
    """What a failed test's namespace held, as ``namespace.json`` in ``target``."""
    dump: dict[str, Any] = {}
    for kind, path in NAMESPACE_DUMP:
        try:
            dump[kind] = rest.get(path.format(ns=quote(namespace)))["items"]
        except (ApiError, OSError) as exc:
            dump[kind] = repr(exc)
    (target / "namespace.json").write_text(json.dumps(dump, indent=2))


def logs_folder(item: pytest.Item) -> Path:
    """A fresh ``e2e/logs/<test>/`` folder (the logs root is git-ignored)."""
    LOGS_ROOT.mkdir(parents=True, exist_ok=True)
    ignore = LOGS_ROOT / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")
    target = LOGS_ROOT / re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid)[:150]
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    return target
