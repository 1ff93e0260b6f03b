"""The chart's alerts evaluated by promtool (built from Prometheus' Go module with the
rest of the toolset): the rules as ``helm template`` renders them are valid, and each
alert fires on the series of its scenario (``alerts/scenarios.yaml``) when it should,
not before, with the labels and text an on-call engineer reads. The same rules on the
series of a real run are evaluated in ``tests/cjob_operator/cluster/test_alerts_live.py``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.controlplane.pytest_plugin import require_binaries
from e2e.kind.chart import Manifest
from e2e.monitoring.rules import alert_names, rules_of

SCENARIOS = Path(__file__).parent / "alerts" / "scenarios.yaml"


@pytest.fixture(scope="module")
def promtool() -> Path:
    return require_binaries(("promtool",)) / "promtool"


def rendered_rules(render: Callable[..., list[Manifest]], **alerts: Any) -> dict[str, Any]:
    objects = render({"metrics": {"prometheusRule": {"enabled": True, "alerts": alerts}}})
    return rules_of(objects)


def run_promtool(promtool: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *map(str, args)], capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_rendered_rules_pass_promtools_check(
        render: Callable[..., list[Manifest]], promtool: Path, tmp_path: Path) -> None:
    rendered = rendered_rules(render)
    assert alert_names(rendered) == [
        "CheckpointedJobCheckpointOverdue", "CheckpointedJobRestarting", "CheckpointedJobFailed",
        "CheckpointedJobSinkStalled", "CheckpointedJobLagGrowing"]
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rendered))
    checked = run_promtool(promtool, "check", "rules", rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 5 rules found" in checked.stdout


def test_each_alert_fires_on_its_scenario_when_it_should_and_not_before(
        render: Callable[..., list[Manifest]], promtool: Path, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rendered_rules(render)))
    shutil.copy(SCENARIOS, tmp_path / "scenarios.yaml")
    tested = run_promtool(promtool, "test", "rules", tmp_path / "scenarios.yaml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_the_scenarios_fail_when_a_threshold_changes(
        render: Callable[..., list[Manifest]], promtool: Path, tmp_path: Path) -> None:
    """The scenarios depend on the values: a test that passed whatever the rules said
    would prove nothing."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(
        rendered_rules(render, checkpointAgeSeconds=900, restarts=2)))
    shutil.copy(SCENARIOS, tmp_path / "scenarios.yaml")
    tested = run_promtool(promtool, "test", "rules", tmp_path / "scenarios.yaml")
    assert tested.returncode != 0
    failed = tested.stdout + tested.stderr
    assert "alertname: CheckpointedJobCheckpointOverdue" in failed
    assert "alertname: CheckpointedJobRestarting" in failed
    assert "alertname: CheckpointedJobFailed" not in failed
