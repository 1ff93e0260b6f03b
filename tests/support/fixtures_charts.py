"""Fixtures of the chart tests: the pinned helm and kubectl, ``helm template`` and chart
installs into the local control plane (shared with the operator's scenarios; see
e2e/kind/chart_fixtures.py)."""

from e2e.kind.chart_fixtures import (  # noqa: F401 - fixtures used by the tests here
    extra_namespaces,
    helm_bin,
    helm_home,
    installed_chart,
    kubectl_bin,
    render,
)
