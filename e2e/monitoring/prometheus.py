"""A real Prometheus server (built from Prometheus' Go module with the toolset) that
scrapes a test's operator and drivers the way the chart's monitors do, and evaluates
the chart's rules.

The Prometheus Operator is not run here: its PodMonitor and ServiceMonitor become
scrape configurations that this module writes by hand, the same way the operator
writes them. The operator's series keep their own labels (the ServiceMonitor's
``honorLabels``); a driver's get its pod's ``namespace``, ``pod`` and job label
(the PodMonitor's ``podTargetLabels``), found through the API server's pod list as
Prometheus' Kubernetes discovery does for the PodMonitor.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.controlplane.procs import Component, free_port
from e2e.controlplane.waiting import wait_for


@dataclass(frozen=True)
class Alert:
    """An alert as ``/api/v1/alerts`` reports it."""

    name: str
    state: str
    """``pending`` or ``firing``."""
    labels: dict[str, str]
    annotations: dict[str, str]


def scrape_config(*, operator_target: str, operator_namespace: str, kubeconfig: Path,
                  namespaces: list[str], interval: str) -> list[dict[str, Any]]:
    """What the Prometheus Operator makes of the chart's ServiceMonitor and PodMonitor."""
    operator = {
        "job_name": "checkpointed-jobs-operator",
        "honor_labels": True,
        "scrape_interval": interval,
        "static_configs": [{"targets": [operator_target],
                            "labels": {"namespace": operator_namespace}}],
    }
    drivers = {
        "job_name": "checkpointed-jobs-drivers",
        "scrape_interval": interval,
        "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": str(kubeconfig),
                                   "namespaces": {"names": namespaces}}],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_managed_by",
                               "__meta_kubernetes_pod_label_checkpointed_io_role"],
             "regex": "checkpointed-jobs;driver", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"],
             "regex": "metrics", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_phase"],
             "regex": "Pending|Running", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_label_checkpointed_io_job"],
             "target_label": "checkpointed_io_job"},
        ],
    }
    return [operator, drivers]


class PrometheusServer:
    """One Prometheus process with its data in ``work_dir``.

    ``rules``: a rules file (:func:`e2e.monitoring.rules.rules_of`); ``scrape``: its
    scrape configurations; ``interval``: how often it scrapes and evaluates the rules.
    """

    def __init__(self, *, binary: Path, work_dir: Path, rules: dict[str, Any],
                 scrape: list[dict[str, Any]], interval: str = "1s") -> None:
        self.port = free_port()
        work_dir.mkdir(parents=True, exist_ok=True)
        (work_dir / "rules.yaml").write_text(yaml.safe_dump(rules))
        (work_dir / "prometheus.yaml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": interval, "evaluation_interval": interval,
                       "scrape_timeout": interval},
            "rule_files": [str(work_dir / "rules.yaml")],
            "scrape_configs": scrape,
        }))
        self.process = Component(
            name="prometheus", log_file=work_dir / "prometheus.log",
            argv=[str(binary), f"--config.file={work_dir / 'prometheus.yaml'}",
                  f"--storage.tsdb.path={work_dir / 'data'}",
                  f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            env={k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout: float = 60.0) -> None:
        self.process.start()
        wait_for(self._ready, what="Prometheus to be ready", timeout=timeout, interval=0.5)

    def _ready(self) -> bool:
        self.process.check_running()
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        self.process.stop(timeout=30)

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of a ``/api/v1`` answer."""
        self.process.check_running()
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as answer:
            body = json.load(answer)
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus answered {body}")
        return body["data"]

    def alerts(self) -> list[Alert]:
        return [Alert(name=a["labels"]["alertname"], state=a["state"],
                      labels={k: v for k, v in a["labels"].items() if k != "alertname"},
                      annotations=a["annotations"])
                for a in self.api("alerts")["alerts"]]

    def targets_up(self) -> dict[str, int]:
        """Scrape pools -> how many of their targets answered the last scrape."""
        found: dict[str, int] = {}
        for target in self.api("targets", state="active")["activeTargets"]:
            pool = target["scrapePool"]
            found[pool] = found.get(pool, 0) + (target["health"] == "up")
        return found

    def query_range(self, expr: str, *, start: float, end: float,
                    step: float) -> list[dict[str, Any]]:
        """The matrix of ``expr`` over ``[start, end]``: ``{"metric", "values"}`` each."""
        data = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                        step=f"{step:g}")
        result: list[dict[str, Any]] = data["result"]
        return result

    def query(self, expr: str, *, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        result: list[dict[str, Any]] = self.api("query", **params)["result"]
        return result
