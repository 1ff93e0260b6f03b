"""pytest fixtures installing the Helm chart into the local control plane.

Use them from a ``conftest.py`` (or list this module in the root ``pytest_plugins``)::

    from e2e.kind.chart_fixtures import (  # noqa: F401
        extra_namespaces, helm_bin, helm_home, installed_chart, kubectl_bin, render,
    )

    @pytest.mark.cluster
    def test_the_operator_runs(installed_chart, process_node):
        release = installed_chart(values={"logLevel": "DEBUG"})
        ...

- ``helm_bin`` / ``kubectl_bin`` (session): the pinned binaries built by
  ``e2e/controlplane/build.sh``; skipped when missing, failed under ``CI=true``.
- ``helm_home`` (session): a throwaway folder for helm's cache, config and data.
- ``installed_chart`` (function): a factory ``installed_chart(values=None, *,
  release=None, namespace=None, wait=False) -> ChartRelease``. The release goes into
  the test's fresh namespace (``kube_namespace``) unless told otherwise, gets a unique
  name (its cluster-scoped RBAC is named after it), and is uninstalled after the test.
  The operator's metrics and health ports default to free ports of this machine,
  because the process node runs every pod on the host's network.
- ``render`` (function): ``render(values=None, **options) -> list[dict]``, the chart
  through ``helm template`` (options of :func:`e2e.kind.chart.render_chart`).
- ``extra_namespaces`` (function): a factory ``extra_namespaces(count) -> list[str]``
  of fresh namespaces deleted after the test (for ``watchNamespaces``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import pytest

from e2e.controlplane.namespaces import (
    create_test_namespace,
    delete_namespace,
    wait_for_default_service_account,
)
from e2e.controlplane.procs import free_port
from e2e.controlplane.pytest_plugin import require_binaries
from e2e.controlplane.rest import RestClient
from e2e.kind.chart import ChartRelease, Manifest, render_chart


class InstallChart(Protocol):
    def __call__(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        release: str | None = None,
        namespace: str | None = None,
        wait: bool = False,
    ) -> ChartRelease: ...


def with_free_ports(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with free metrics and health ports unless the caller chose them."""
    result = dict(values)
    metrics = dict(result.get("metrics") or {})
    metrics.setdefault("port", free_port())
    result["metrics"] = metrics
    health = dict(result.get("health") or {})
    health.setdefault("port", free_port())
    result["health"] = health
    return result


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    return require_binaries(("helm",)) / "helm"


@pytest.fixture(scope="session")
def kubectl_bin() -> Path:
    return require_binaries(("kubectl",)) / "kubectl"


@pytest.fixture(scope="session")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


@pytest.fixture
def render(helm_bin: Path, helm_home: Path) -> Callable[..., list[Manifest]]:
    def run(values: Mapping[str, Any] | None = None, **options: Any) -> list[Manifest]:
        return render_chart(helm=helm_bin, home=helm_home, values=values, **options)

    return run


@pytest.fixture
def installed_chart(
    control_plane: Any, kube_namespace: str, helm_bin: Path, helm_home: Path
) -> Iterator[InstallChart]:
    releases: list[ChartRelease] = []

    def install(
        values: Mapping[str, Any] | None = None,
        *,
        release: str | None = None,
        namespace: str | None = None,
        wait: bool = False,
    ) -> ChartRelease:
        chart_release = ChartRelease(
            name=release or f"cjob-{secrets.token_hex(3)}",
            namespace=namespace or kube_namespace,
            helm=helm_bin,
            home=helm_home,
            kubeconfig=Path(control_plane.kubeconfig),
            values=with_free_ports(values or {}),
        )
        releases.append(chart_release)
        chart_release.install(wait=wait)
        return chart_release

    yield install
    for chart_release in reversed(releases):
        chart_release.uninstall(missing_ok=True)


@pytest.fixture
def extra_namespaces(kube_rest: RestClient) -> Iterator[Callable[[int], list[str]]]:
    created: list[str] = []

    def make(count: int) -> list[str]:
        names = [f"t-chart-{secrets.token_hex(4)}" for _ in range(count)]
        for name in names:
            create_test_namespace(kube_rest, name)
            created.append(name)
        for name in names:
            wait_for_default_service_account(kube_rest, name)
        return names

    yield make
    for name in created:
        delete_namespace(kube_rest, name)
