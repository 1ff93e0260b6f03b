"""pytest fixtures for the scenarios on kind (marker ``kind``).

- ``kind_cluster`` (session): a one-node kind cluster with the project's operator and
  runtime images loaded (``kind load image-archive``), made by ``kind_session``, which
  the node-loss run's conftest asks for a worker node too. Where a Docker engine answers
  (a developer's machine), it is used (``SystemEngine``); otherwise, as root with
  Debian's ``docker.io`` installed, the private engine of ``engine.py`` is started for
  the session. Either way the run takes the host lease, records the host first, and
  puts it back after, step by step: what could not be put back is logged and given
  as a warning of the session. The node image is the one ``node_image.py`` builds here,
  unless ``KIND_NODE_IMAGE`` names another (kind's own images need a registry).
  Under ``CI=true`` anything missing fails the tests; elsewhere they are skipped with
  the reason.
- ``kind_namespace`` (function): a fresh namespace enforcing Pod Security
  "restricted", deleted after.

When a test fails, the node's kubelet and containerd journal and a dump of the
test's namespace are saved under ``e2e/logs/<test>/``.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import warnings
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from e2e.controlplane.binaries import ALL_BINARIES
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
from e2e.kind.cluster import KindCluster
from e2e.kind.engine import DockerEngine, EngineError, choose_engine
from e2e.realnode.host import Teardown
from e2e.realnode.node import ImageArchive
from e2e.realnode.scenario import RESTRICTED

_NAMESPACE_KEY = pytest.StashKey[str]()
_state: dict[str, Any] = {}


class HostNotRestoredWarning(UserWarning):
    """The kind session could not put everything of the host back; says what."""


def _log(line: str) -> None:
    print(f"[kind] {line}", flush=True)


@pytest.fixture(scope="session")
def kind_cluster() -> Iterator[KindCluster]:
    yield from kind_session(workers=0)


def kind_session(*, workers: int) -> Iterator[KindCluster]:
    """A kind cluster of a control-plane node and ``workers`` more for a pytest
    session, the images loaded (the operator's on the control-plane node only: it is
    the node that stays), the host put back after."""
    bin_dir = require_binaries(ALL_BINARIES)
    engine = choose_engine(log=_log)
    try:
        engine.start()
    except EngineError as exc:
        unavailable(f"kind scenarios need a Docker engine: {exc}")
    cluster: KindCluster | None = None
    try:
        from e2e.images import build_images
        from e2e.kind.node_image import build_node_image

        built = build_images(log=_log)
        configured = os.environ.get("KIND_NODE_IMAGE")
        node_image = configured or build_node_image(engine=engine, bin_dir=bin_dir, log=_log)
        cluster = KindCluster(
            name=f"cjob-e2e-{secrets.token_hex(3)}", engine=engine, kind=bin_dir / "kind",
            bin_dir=bin_dir, node_image=node_image, local_image=configured is None,
            runtime_image=built.runtime.tag, operator_image=built.operator.tag, log=_log,
            workers=workers,
        )  # fmt: skip
        cluster.create()
        _state["cluster"] = cluster
        cluster.import_image(ImageArchive(tag=built.runtime.tag, path=built.runtime.archive))
        cluster.import_image(ImageArchive(tag=built.operator.tag, path=built.operator.archive),
                             nodes=[cluster.node])
        yield cluster
    finally:
        _state.clear()
        tear_down_kind_session(cluster=cluster, engine=engine)


def tear_down_kind_session(*, cluster: KindCluster | None, engine: DockerEngine) -> None:
    """The cluster, its files and the engine, each step whatever the others did (each
    logs its own problems; the session gets them as one warning)."""
    teardown = Teardown()
    if cluster is not None:
        teardown.step("kind cluster", cluster.delete)
        teardown.step("cluster files", functools.partial(shutil.rmtree, cluster.work_dir,
                                                         ignore_errors=True))  # fmt: skip
    teardown.step("engine", engine.stop)
    problems = teardown.finish()
    if problems:
        warnings.warn(HostNotRestoredWarning("the kind session did not put the host back "
                                             "fully: " + "; ".join(problems)), stacklevel=1)


@pytest.fixture
def kind_namespace(request: pytest.FixtureRequest, kind_cluster: KindCluster) -> Iterator[str]:
    rest = kind_cluster.rest()
    name = namespace_name_for(request.node.name)
    create_test_namespace(rest, name)
    request.node.stash[_NAMESPACE_KEY] = name
    rest.request("PATCH", f"/api/v1/namespaces/{name}", body={"metadata": {"labels": RESTRICTED}},
                 content_type="application/merge-patch+json")  # fmt: skip
    wait_for_default_service_account(rest, name)
    try:
        yield name
    finally:
        delete_namespace(rest, name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed and "cluster" in _state:
        try:
            cluster: KindCluster = _state["cluster"]
            target = logs_folder(item)
            target.mkdir(parents=True, exist_ok=True)
            (target / "node-journal.txt").write_text(cluster.logs())
            namespace = item.stash.get(_NAMESPACE_KEY, None)
            if namespace is not None:
                write_namespace_dump(cluster.rest(), namespace=namespace, target=target)
            report.sections.append(("kind node logs", f"saved to {target}"))
        except Exception as exc:  # never hide the test's own failure
            report.sections.append(("kind node logs", f"could not save logs: {exc!r}"))
    return report
