"""The chart's files on their own (no helm needed): metadata, CRD copy, values, schema,
documentation and the Grafana dashboard."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from paths import REPO


def _load_chart_values() -> Any:
    """``scripts/chart_values.py``, the README table's writer (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("chart_values",
                                                  REPO / "scripts" / "chart_values.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


chart_values = _load_chart_values()

CHART = REPO / "charts" / "checkpointed-jobs"
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$"
)
CAMEL_CASE = re.compile(r"^[a-z][a-zA-Z0-9]*$")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def default_values() -> dict[str, Any]:
    values: dict[str, Any] = load_yaml(CHART / "values.yaml")
    return values


def schema() -> dict[str, Any]:
    result: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return result


def leaf_paths(node: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the documented values: nested maps are followed, except the
    free-form ones (their defaults are examples, not keys of the chart)."""
    if isinstance(node, dict) and node and prefix not in FREE_FORM:
        paths: list[str] = []
        for key, value in node.items():
            paths += leaf_paths(value, f"{prefix}.{key}" if prefix else key)
        return paths
    return [prefix]


FREE_FORM = {"resources", "podSecurityContext", "securityContext"}


def schema_node(path: str) -> dict[str, Any] | None:
    node: dict[str, Any] = schema()
    for key in path.split("."):
        props = node.get("properties", {})
        if key not in props:
            return None
        node = props[key]
    return node


def validation_errors(values: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(schema())
    return [error.message for error in validator.iter_errors(values)]


# --- metadata ------------------------------------------------------------------------


def test_chart_metadata_is_complete_and_versions_are_semver() -> None:
    chart = load_yaml(CHART / "Chart.yaml")
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "checkpointed-jobs"
    assert SEMVER.match(chart["version"]), chart["version"]
    assert chart["version"] == "0.1.0"
    assert chart["appVersion"] == "0.1.0" and isinstance(chart["appVersion"], str)
    assert chart["kubeVersion"].startswith(">=")
    assert chart["description"].strip()
    assert chart["home"].startswith("https://")
    assert chart["maintainers"] and all(m.get("name") for m in chart["maintainers"])


def test_the_app_version_is_the_python_distribution_version() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert load_yaml(CHART / "Chart.yaml")["appVersion"] == project["version"]


CRD_FILES = sorted(path.name for path in (REPO / "crds").glob("*.yaml"))


@pytest.mark.parametrize("name", CRD_FILES)
def test_the_chart_crd_is_a_byte_identical_copy_of_the_source_of_truth(name: str) -> None:
    source = (REPO / "crds" / name).read_bytes()
    copy = (CHART / "crds" / name).read_bytes()
    assert copy == source, (
        f"charts/checkpointed-jobs/crds/{name} differs from "
        f"crds/{name}; run: make crds (which refreshes the copies)"
    )


def committed(path: str) -> bytes | None:
    """The file as the checked-out commit holds it; None outside a git checkout."""
    result = subprocess.run(["git", "-C", str(REPO), "show", f"HEAD:{path}"],
                            capture_output=True, timeout=60, check=False)
    return result.stdout if result.returncode == 0 else None


@pytest.mark.parametrize("name", CRD_FILES)
def test_the_committed_chart_crd_is_the_committed_source_of_truth(name: str) -> None:
    # The build refreshes the working copy before the tests run, so the test above
    # cannot see a commit that changed the CRD without its chart copy; this one can.
    source = committed(f"crds/{name}")
    copy = committed(f"charts/checkpointed-jobs/crds/{name}")
    if source is None or copy is None:
        pytest.skip("not a git checkout with both CRD files committed")
    assert copy == source, (
        f"the commit's charts/checkpointed-jobs/crds/{name} differs from its "
        f"crds/{name}; run make chart-crds and commit the chart's copy"
    )


def make_chart_crds(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", "-C", str(root), "chart-crds"],
                          capture_output=True, text=True, timeout=60, check=False)


def repository_files(tmp_path: Path) -> tuple[Path, Path]:
    """The Makefile and the two CRD files, in sync, in a scratch copy of the repository's
    layout."""
    (tmp_path / "crds").mkdir()
    (tmp_path / "charts" / "checkpointed-jobs" / "crds").mkdir(parents=True)
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    source = tmp_path / "crds" / "checkpointedjob.yaml"
    copy = tmp_path / "charts" / "checkpointed-jobs" / "crds" / "checkpointedjob.yaml"
    shutil.copy(REPO / "crds" / "checkpointedjob.yaml", source)
    shutil.copy(source, copy)
    for name in CRD_FILES:
        if name != source.name:
            shutil.copy(REPO / "crds" / name, tmp_path / "crds" / name)
            shutil.copy(REPO / "crds" / name, copy.parent / name)
    return source, copy


def test_make_chart_crds_copies_an_edited_crd_into_the_chart(tmp_path: Path) -> None:
    source, copy = repository_files(tmp_path)
    source.write_bytes(source.read_bytes() + b"# an edit\n")
    result = make_chart_crds(tmp_path)
    assert result.returncode == 0, result.stderr
    assert copy.read_bytes() == source.read_bytes()


def test_make_chart_crds_leaves_a_chart_copy_that_is_in_sync_untouched(tmp_path: Path) -> None:
    _source, copy = repository_files(tmp_path)
    old = 10**18   # older than the source: a copy by age would rewrite it
    os.utime(copy, ns=(old, old))
    result = make_chart_crds(tmp_path)
    assert result.returncode == 0, result.stderr
    assert copy.stat().st_mtime_ns == old
    assert result.stdout == ""


def test_the_build_refreshes_the_chart_crd_before_linting_and_testing() -> None:
    makefile = (REPO / "Makefile").read_text()
    for target in ("lint", "test-unit", "builds", "cluster", "e2e-kind"):
        (line,) = [x for x in makefile.splitlines() if x.startswith(f"{target}:")]
        assert "chart-crds" in line.split(":", 1)[1].split(), line


def test_the_chart_ships_kopf_peering_crds_for_both_peering_modes() -> None:
    docs = list(yaml.safe_load_all((CHART / "crds" / "kopf-peerings.yaml").read_text()))
    scopes = {d["spec"]["names"]["kind"]: d["spec"]["scope"] for d in docs}
    assert scopes == {"ClusterKopfPeering": "Cluster", "KopfPeering": "Namespaced"}
    assert {d["spec"]["group"] for d in docs} == {"kopf.dev"}


def test_test_inputs_are_kept_out_of_the_packaged_chart() -> None:
    ignored = (CHART / ".helmignore").read_text().splitlines()
    assert "ci/" in ignored


# --- values and schema -----------------------------------------------------------------


def test_the_default_values_satisfy_the_schema() -> None:
    assert validation_errors(default_values()) == []


def test_the_full_ci_values_satisfy_the_schema() -> None:
    merged = default_values()
    merged.update(load_yaml(CHART / "ci" / "full-values.yaml"))
    assert validation_errors(merged) == []


def test_the_schema_is_draft_07_and_closed_at_the_top_level() -> None:
    s = schema()
    assert s["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert s["additionalProperties"] is False
    jsonschema.Draft7Validator.check_schema(s)


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"replicaCount": "two"}, "'two' is not of type 'integer'"),
        ({"replicaCount": -1}, "less than the minimum"),
        ({"replicaCuont": 2}, "'replicaCuont' was unexpected"),
        ({"image": {"repository": "x", "pullPolicy": "Sometimes"}}, "'Sometimes' is not one of"),
        ({"watchNamespaces": "team-a"}, "'team-a' is not of type 'array'"),
        ({"watchNamespaces": ["Team_A"]}, "does not match"),
        ({"watchNamespaces": ["a", "a"]}, "non-unique"),
        ({"logLevel": "LOUD"}, "'LOUD' is not one of"),
        ({"metrics": {**default_values()["metrics"], "port": 70000}}, "greater than the maximum"),
        (
            {"metrics": {**default_values()["metrics"], "serviceMonitor": {"enabled": "yes"}}},
            "'yes' is not of type 'boolean'",
        ),
        ({"rbac": {"create": True, "createAll": True}}, "'createAll' was unexpected"),
        ({"peering": {"enabled": True, "name": "Not A Name"}}, "does not match"),
        ({"runtimeImage": {"repository": "team/runtime", "tag": "2 0"}}, "does not match"),
        ({"runtimeImage": {"repository": "team/runtime", "digest": "x"}}, "'digest' was unexpected"),
    ],
)
def test_the_schema_rejects_bad_values(change: dict[str, Any], complaint: str) -> None:
    values = default_values()
    values.update(change)
    errors = validation_errors(values)
    assert any(complaint in e for e in errors), errors


def test_every_value_key_is_camel_case() -> None:
    bad = [
        path
        for path in leaf_paths(default_values())
        if not all(CAMEL_CASE.match(part) for part in path.split("."))
    ]
    assert bad == []


def test_every_value_is_covered_by_the_schema_and_every_schema_key_has_a_default() -> None:
    values = default_values()
    missing = [p for p in leaf_paths(values) if schema_node(p) is None]
    assert missing == []
    unknown = [k for k in schema()["properties"] if k != "global" and k not in values]
    assert unknown == []


def commented_paths(text: str) -> set[str]:
    """Dotted paths of the keys in values.yaml that have a comment right above them."""
    stack: list[str] = []
    found: set[str] = set()
    previous = ""
    for line in text.splitlines():
        match = re.match(r"^(\s*)([A-Za-z][A-Za-z0-9]*):", line)
        if match:
            depth = len(match.group(1)) // 2
            stack = [*stack[:depth], match.group(2)]
            if previous.startswith("#"):
                found.add(".".join(stack))
        if line.strip():
            previous = line.strip()
    return found


def test_every_value_is_documented_in_values_yaml_and_in_the_readme_table() -> None:
    readme = (CHART / "README.md").read_text()
    table = readme.split("## Values", 1)[1]
    table_keys = set(re.findall(r"^\| `([A-Za-z0-9.]+)` \|", table, flags=re.MULTILINE))
    paths = leaf_paths(default_values())
    assert sorted(set(paths) - table_keys) == []
    assert sorted(table_keys - set(paths)) == []
    undocumented = set(paths) - commented_paths((CHART / "values.yaml").read_text())
    assert sorted(undocumented) == []


def test_the_readme_table_of_values_is_the_one_values_yaml_documents() -> None:
    assert chart_values.main(["--check"]) == 0


def test_a_value_without_a_comment_stops_the_table_from_being_written() -> None:
    with pytest.raises(ValueError, match=r"image\.tag has no"):
        chart_values.rows("image:\n  # -- Repository.\n  repository: x\n  tag: ''\n")


def test_a_map_documented_as_a_whole_is_one_row_with_its_default() -> None:
    rows = chart_values.rows("# -- Limits.\nresources:\n  limits:\n    cpu: 1\n"
                             "# -- Port.\nport: 80\n")
    assert [row.render() for row in rows] == [
        '| `resources` | `{"limits":{"cpu":1}}` | Limits. |', "| `port` | `80` | Port. |"]


def test_the_docs_say_that_uninstall_keeps_the_crds_and_how_to_remove_them() -> None:
    readme = (CHART / "README.md").read_text()
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    for text in (readme, notes):
        assert "kubectl delete crd checkpointedjobs.checkpointed.io" in text
    assert "keeps the CRDs" in readme


# --- Grafana dashboard -----------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    result: dict[str, Any] = json.loads(
        (CHART / "dashboards" / "checkpointed-jobs.json").read_text()
    )
    return result


def test_the_dashboard_has_the_checkpoint_restart_throughput_and_lag_panels() -> None:
    exprs = [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]
    joined = "\n".join(exprs)
    assert ("time() - max by (namespace, cjob_job) "
            "(cjob_checkpoint_last_completed_timestamp_seconds") in joined
    assert "cjob_operator_latest_checkpoint_age_seconds" in joined
    assert "histogram_quantile(0.99" in joined and "cjob_checkpoint_duration_seconds_bucket" in joined
    assert "cjob_operator_restarts_total" in joined
    assert "sum by (namespace, cjob_job) (rate(cjob_job_records_in_total[1m]))" in joined.replace(
        '{namespace=~"$namespace"}', "")
    assert "sum by (namespace, cjob_job, topic) (cjob_job_source_lag_records" in joined
    assert "max by (namespace, cjob_job) (cjob_job_watermark_lag_seconds" in joined
    assert "rate(cjob_job_late_records_total" in joined


def test_the_dashboard_splits_series_by_the_job_label_the_metrics_carry() -> None:
    # ``job`` is the scrape job's name in Prometheus; the CheckpointedJob is ``cjob_job``.
    exprs = [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]
    assert any("cjob_job" in e for e in exprs)
    assert [e for e in exprs if "by (namespace, job" in e or "by (job" in e] == []


def test_the_dashboard_panels_are_well_formed() -> None:
    board = dashboard()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    assert board["uid"] and board["title"]
    variables = {v["name"] for v in board["templating"]["list"]}
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            # Brackets and parentheses balance in every query.
            expr = target["expr"]
            assert expr.count("(") == expr.count(")"), expr
            assert expr.count("{") == expr.count("}"), expr
            for used in re.findall(r"\$(\w+)", expr):
                assert used in variables, f"{used} is not a dashboard variable"


# --- alerting rules --------------------------------------------------------------------


def served_metric_names() -> set[str]:
    """Every series name the drivers and the operator serve, as Prometheus sees them."""
    from cjob_operator.metrics import OperatorMetrics
    from prometheus_client import generate_latest

    from cjob_spec.status import Phase
    from job_runtime.metrics import DriverMetrics

    driver = DriverMetrics(job="clicks-uid")
    driver.progress(records_in=1, records_out=1, failed=0, restarts=0)
    driver.source_lag([type("Lag", (), {"topic": "t", "partition": 0, "records": 1})()])
    driver.sinks(pending_intervals=1, pending_bytes=1, oldest_pending_seconds=1.0,
                 dead_letters=0)
    operator = OperatorMetrics()
    operator.record_job(namespace="team", name="clicks", phase=Phase.RUNNING,
                        latest_completed_at=0.0, store_bytes=1)
    operator.count_restart(reason="DriverFailed")
    pages = generate_latest(driver.registry) + generate_latest(operator.registry)
    return {line.split("{")[0].split(" ")[0] for line in pages.decode().splitlines()
            if line and not line.startswith("#")}


def test_every_series_an_alert_reads_is_one_the_drivers_or_the_operator_serve() -> None:
    rules = (CHART / "templates" / "prometheusrule.yaml").read_text()
    read = set(re.findall(r"\b(cjob_[a-z_]+)\b", rules)) - {"cjob_job"}  # a label
    assert read, "the rules read no series"
    assert sorted(read - served_metric_names()) == []


def test_each_alert_the_issue_asks_for_is_there_once() -> None:
    rules = (CHART / "templates" / "prometheusrule.yaml").read_text()
    alerts = re.findall(r"- alert: (\w+)", rules)
    assert sorted(alerts) == sorted(set(alerts)) == [
        "CheckpointedJobCheckpointOverdue", "CheckpointedJobFailed",
        "CheckpointedJobLagGrowing", "CheckpointedJobRestarting",
        "CheckpointedJobSinkStalled"]
