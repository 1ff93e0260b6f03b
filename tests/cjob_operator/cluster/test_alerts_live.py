"""The chart's alerts and dashboard on a real Prometheus scraping a real operator and
its drivers: no alert on a healthy job, the restarts alert on a killed driver, the
failed alert on a job that fails for good, nothing after a job finished; and every
dashboard panel shows the job's series (drawn as a picture in the test's logs).

Prometheus scrapes as the chart's ServiceMonitor and PodMonitor would have the
Prometheus Operator make it (``e2e.monitoring.prometheus``), every second, and
evaluates the rules ``helm template`` renders, with thresholds a short test can reach
(one restart within ten minutes).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_live import JobWatcher, Kubectl, OperatorProcess

from e2e.controlplane.pytest_plugin import LOGS_ROOT, require_binaries
from e2e.controlplane.waiting import wait_for
from e2e.jobs import running_sum_job
from e2e.kind.chart import Manifest
from e2e.monitoring import dashboard
from e2e.monitoring.prometheus import Alert, PrometheusServer, scrape_config
from e2e.monitoring.rules import rules_of


@pytest.fixture
def prometheus(render: Callable[..., list[Manifest]], control_plane: Any,
               kube_namespace: str, cjob_operator: OperatorProcess,
               tmp_path: Path) -> Iterator[PrometheusServer]:
    binary = require_binaries(("prometheus",)) / "prometheus"
    rules = rules_of(render({"metrics": {"prometheusRule": {
        "enabled": True, "alerts": {"restarts": 1, "restartWindow": "10m"}}}}))
    server = PrometheusServer(
        binary=binary, work_dir=tmp_path / "prometheus", rules=rules,
        scrape=scrape_config(operator_target=f"127.0.0.1:{cjob_operator.metrics_port}",
                             operator_namespace=kube_namespace,
                             kubeconfig=control_plane.kubeconfig,
                             namespaces=[kube_namespace], interval="1s"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def firing(server: PrometheusServer) -> list[Alert]:
    return [a for a in server.alerts() if a.state == "firing"]


def test_alerts_fire_on_a_killed_driver_and_a_failed_job_and_the_dashboard_shows_the_job(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, process_node: Any,
    cjob_operator: OperatorProcess, prometheus: PrometheusServer, tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    started = time.time()
    count = 14_000
    assert kubectl.apply(running_sum_job(name="sums", namespace=kube_namespace,
                                         work_dir=tmp_path / "sums", count=count, rate=500,
                                         parallelism=2)).returncode == 0
    sums = JobWatcher(rest=kube_rest, namespace=kube_namespace, name="sums",
                      operator=cjob_operator)
    sums.until(lambda s: s.get("phase") == "Running"
               and s.get("latestCheckpoint", {}).get("id", 0) >= 3,
               what="attempt 1 to run and complete three checkpoints", timeout=180)

    # Both monitors' targets answer, and the driver's series carry the job's name.
    wait_for(lambda: prometheus.targets_up() == {"checkpointed-jobs-operator": 1,
                                                 "checkpointed-jobs-drivers": 1},
             what="the operator and the driver scraped", timeout=60)
    wait_for(lambda: prometheus.query(
        f'cjob_job_records_in_total{{namespace="{kube_namespace}",cjob_job="sums",'
        f'pod="sums-attempt-1"}}'), what="the driver's series", timeout=30)
    assert firing(prometheus) == [], "a healthy job raises no alert"

    # The driver is killed: the restarts alert fires for its reason, once restarted.
    killed_at = time.time()
    assert process_node.kill_pod_process(namespace=kube_namespace, name="sums-attempt-1") > 0
    sums.until(lambda s: s.get("attempt") == 2 and s.get("phase") == "Running",
               what="attempt 2 to run", timeout=120)
    restarting = wait_for(
        lambda: [a for a in firing(prometheus) if a.name == "CheckpointedJobRestarting"],
        what="the restarts alert", timeout=60)
    assert [a.labels for a in restarting] == [{"reason": "Killed", "severity": "warning"}]
    assert restarting[0].annotations["summary"].endswith(
        "CheckpointedJob attempts ended (Killed) within 10m")

    # A job whose code cannot be imported fails for good: the failed alert fires.
    assert kubectl.apply(running_sum_job(name="broken", namespace=kube_namespace,
                                         work_dir=tmp_path / "broken", count=100, rate=100,
                                         entrypoint="no_such_module:build")).returncode == 0
    failed = wait_for(
        lambda: [a for a in firing(prometheus) if a.name == "CheckpointedJobFailed"],
        what="the failed alert", timeout=180)
    assert failed[0].annotations["summary"] == "1 CheckpointedJob(s) failed for good"

    # The running sum finishes: it serves no checkpoint age any more, and nothing but
    # the two alerts above fired all along (none of the others ever went pending).
    sums.until(lambda s: s.get("phase") == "Succeeded", what="the job to finish", timeout=240)
    wait_for(lambda: not prometheus.query(
        'cjob_operator_latest_checkpoint_age_seconds{cjob_job="sums"}'),
        what="the finished job's checkpoint age to go", timeout=30)
    window = int(time.time() - started) + 5
    ever = prometheus.query(f"count by (alertname) (max_over_time(ALERTS[{window}s]))")
    assert sorted(r["metric"]["alertname"] for r in ever) == [
        "CheckpointedJobFailed", "CheckpointedJobRestarting"]

    # Every panel of the dashboard has the job's series over the run.
    ended = time.time()
    panels = dashboard.evaluate(prometheus, start=started, end=ended, step=2.0,
                                variables={"namespace": kube_namespace})
    picture_dir = LOGS_ROOT / "dashboard"
    dashboard.draw(panels, path=picture_dir / "checkpointed-jobs.png", start=started, end=ended,
                   title="Checkpointed Jobs: a running sum, its driver killed; a job that fails",
                   marks={"driver killed": killed_at})
    (picture_dir / "checkpointed-jobs.json").write_text(json.dumps(dashboard.to_json(panels)))
    empty = [p.title for p in panels if not p.lines]
    by_title = {p.title: p for p in panels}
    # A job without Kafka or event time has no lag or late records to show.
    assert empty == ["Source lag", "Watermark lag", "Late records"], empty
    rates = by_title["Records per second"].lines
    assert [line.legend for line in rates] == [f"{kube_namespace}/sums"], "one line a job"
    assert max(v for _, v in rates[0].points) > 100, "it read about 500 records a second"
    restarts = {line.legend: max(v for _, v in line.points)
                for line in by_title["Job restarts"].lines}
    assert list(restarts) == ["Killed"] and restarts["Killed"] >= 1, restarts
    ages = by_title["Checkpoint age (driver)"].lines
    assert [line.legend for line in ages] == [f"{kube_namespace}/sums"], "one line a job"
    assert max(v for _, v in ages[0].points) < 60
    print(f"dashboard drawn in {picture_dir}")
