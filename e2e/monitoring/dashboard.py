"""The chart's Grafana dashboard drawn from a Prometheus server's series.

Grafana is not built here (it is not under a licence this project takes code from),
so its part is done the way it does it: every panel's queries, with the dashboard's
variables filled in, run as range queries over the window shown, one line per series,
named by the target's ``legendFormat``. What a panel would show is then a picture to
look at, and each panel's series a value a test can check.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.monitoring.prometheus import PrometheusServer
from e2e.repo import REPO_ROOT

DASHBOARD = REPO_ROOT / "charts" / "checkpointed-jobs" / "dashboards" / "checkpointed-jobs.json"
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@dataclass(frozen=True)
class Line:
    """One series of a panel: its legend and its points (unix time, value)."""

    legend: str
    points: list[tuple[float, float]]


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: list[str]
    lines: list[Line] = field(default_factory=list)


def _legend(template: str | None, metric: dict[str, str]) -> str:
    if template:
        return _LEGEND.sub(lambda m: metric.get(m.group(1), ""), template)
    shown = ", ".join(f"{k}={v}" for k, v in sorted(metric.items()) if k != "__name__")
    return f"{metric.get('__name__', '')}{{{shown}}}"


def evaluate(server: PrometheusServer, *, start: float, end: float, step: float,
             variables: dict[str, str], dashboard: Path = DASHBOARD) -> list[Panel]:
    """Every panel of ``dashboard`` over ``[start, end]``, ``$name`` filled from
    ``variables``."""
    document = json.loads(dashboard.read_text())
    panels = []
    for panel in document["panels"]:
        targets = panel.get("targets", [])
        queries, lines = [], []
        for target in targets:
            expr = target["expr"]
            for name, value in variables.items():
                expr = expr.replace(f"${name}", value)
            queries.append(expr)
            for series in server.query_range(expr, start=start, end=end, step=step):
                points = [(float(t), float(v)) for t, v in series["values"]]
                lines.append(Line(legend=_legend(target.get("legendFormat"), series["metric"]),
                                  points=points))
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        panels.append(Panel(title=panel["title"], unit=unit, queries=queries, lines=lines))
    return panels


def draw(panels: list[Panel], *, path: Path, title: str, start: float, end: float,
         marks: dict[str, float] | None = None) -> None:
    """The panels as one picture, two a row as the dashboard lays them out; ``marks``
    (label -> unix time) are drawn as vertical lines on every panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = (len(panels) + 1) // 2
    figure, axes = plt.subplots(rows, 2, figsize=(14, 3.2 * rows), squeeze=False)
    for index, panel in enumerate(panels):
        ax = axes[index // 2][index % 2]
        ax.set_title(panel.title, fontsize=10)
        for line in panel.lines:
            ax.plot([t - start for t, _ in line.points], [v for _, v in line.points],
                    label=line.legend, linewidth=1.2)
        for label, at in (marks or {}).items():
            ax.axvline(at - start, color="grey", linestyle=":", linewidth=1)
            ax.annotate(label, (at - start, 1), xycoords=("data", "axes fraction"),
                        fontsize=7, color="grey", rotation=90, va="top", ha="right")
        if panel.unit:
            ax.set_ylabel(panel.unit, fontsize=8)
        ax.set_xlim(0, end - start)
        ax.set_xlabel("seconds", fontsize=8)
        ax.tick_params(labelsize=7)
        if panel.lines:
            ax.legend(fontsize=7, loc="upper left", framealpha=0.6)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes,
                    color="grey")
    for index in range(len(panels), rows * 2):
        axes[index // 2][index % 2].set_visible(False)
    figure.suptitle(title, fontsize=12)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)


def to_json(panels: list[Panel]) -> dict[str, Any]:
    """The panels' series, versioned, to keep beside the picture."""
    return {"version": 1, "panels": [
        {"title": p.title, "unit": p.unit, "queries": p.queries,
         "lines": [{"legend": line.legend, "points": line.points} for line in p.lines]}
        for p in panels]}
