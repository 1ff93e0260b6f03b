"""The chart's PrometheusRule as the rules file Prometheus and promtool read.

The Prometheus Operator turns a PrometheusRule's ``spec`` into a rules file as it is:
``groups``, each with its rules. Tests render the chart and hand that to promtool or
to a Prometheus server, so what is evaluated is what a user installs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class NoPrometheusRuleError(LookupError):
    """The rendered chart holds no PrometheusRule (``metrics.prometheusRule.enabled``)."""


def rules_of(objects: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The rules file of the one PrometheusRule among ``objects``."""
    found = [o for o in objects if o.get("kind") == "PrometheusRule"]
    if len(found) != 1:
        raise NoPrometheusRuleError(f"{len(found)} PrometheusRule objects rendered, not 1")
    spec: dict[str, Any] = found[0]["spec"]
    return {"groups": spec["groups"]}


def alert_names(rules: dict[str, Any]) -> list[str]:
    """The alerts a rules file defines, in its order."""
    return [rule["alert"] for group in rules["groups"] for rule in group["rules"]
            if "alert" in rule]
