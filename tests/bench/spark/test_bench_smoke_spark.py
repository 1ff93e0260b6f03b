"""The comparison benchmarks still run, every row of them, and write what the READMEs quote.

A tiny scale, once per row: it does not measure anything, it keeps the benchmark
code (ours, each tuned Structured Streaming baseline, the results file) from
rotting between the rare full runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from paths import REPO

from bench import python_state


def _bench(name: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "BENCH_RESULTS": str(tmp_path / "results"),
           "BENCH_WORK": str(tmp_path / "work"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "bench", name, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1500, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result: dict[str, Any] = json.loads((tmp_path / "results" / f"{name}.json").read_text())
    return result


def _check_rows(result: dict[str, Any], *, labels: list[str], records: int) -> None:
    assert [r["label"] for r in result["rows"]] == labels
    for row in result["rows"]:
        if row["kind"] == "baseline":
            assert row["rows_per_batch"] > 0
            assert row["tuning"], f"{row['label']} was not tuned"
            assert row["rows_per_batch"] in [p["rows_per_batch"] for p in row["tuning"]]
    (repetition,) = result["runs"]
    assert [m["label"] for m in repetition] == labels
    for m in repetition:
        assert m["records"] == records
        assert m["steady_records_per_second"] > 0
        assert 0 < m["seconds_to_last_record"] <= m["wall_seconds"]
    for ratio in result["ratios"]:
        assert len(ratio["steady"]) == len(ratio["end_to_end"]) == 1
        assert ratio["steady_median"] > 0 and ratio["end_to_end_median"] > 0
    assert result["load_average"]["samples"]


@pytest.mark.timeout(1600)
def test_each_kind_of_throughput_row_runs_once_at_a_tiny_scale_and_reports_both_rates(
        tmp_path: Path) -> None:
    """Both of ours, and two of the four baselines that between them take each state
    store (RocksDB, HDFS-backed) and each sink (noop, Parquet files): the other two are
    the same code with the other pairing, and each baseline costs two Spark starts."""
    result = _bench("throughput", tmp_path, "--records", "30000", "--keys", "100",
                    "--repeat", "1", "--only", "ours, discard", "--only", "SS rocksdb, noop",
                    "--only", "ours, files", "--only", "SS hdfs, files")
    _check_rows(result, records=30000, labels=[
        "ours, discard", "SS rocksdb, noop", "ours, files", "SS hdfs, files"])
    assert [(r["ours"], r["against_fastest_of"]) for r in result["ratios"]] == [
        ("ours, discard", ["SS rocksdb, noop"]), ("ours, files", ["SS hdfs, files"])]
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    assert "throughput_ratio_vs_structured_streaming" in summary
    rate = summary["throughput_records_per_second"]
    assert rate["measured_at"] == summary["throughput_ratio_vs_structured_streaming"]["measured_at"]
    assert rate["value"] == pytest.approx(next(
        m["steady_records_per_second"] for m in result["medians"]
        if m["label"] == "ours, discard"))


@pytest.mark.timeout(1600)
def test_the_python_state_comparison_runs_once_at_a_tiny_scale(tmp_path: Path) -> None:
    result = _bench("python-state", tmp_path, "--records", "20000", "--keys", "100",
                    "--repeat", "1")
    labels = ["ours, process", "SS applyInPandasWithState",
              "SS applyInPandasWithState at 1 s"]
    if python_state.installed("google.protobuf"):
        labels += ["SS transformWithStateInPandas", "SS transformWithStateInPandas at 1 s"]
    else:
        assert "protobuf" in result["left_out"]["SS transformWithStateInPandas"]
    _check_rows(result, records=20000, labels=labels)
    assert [len(r["against_fastest_of"]) for r in result["ratios"]] == [
        len(labels[1:]) // 2] * 2


@pytest.mark.timeout(1600)
def test_the_timers_comparison_runs_once_at_a_tiny_scale_and_both_sides_match_the_reference(
        tmp_path: Path) -> None:
    result = _bench("timers", tmp_path, "--records", "40000", "--keys", "300",
                    "--file-records", "5000", "--max-files", "2", "--repeat", "1")
    (repetition,) = result["runs"]
    for side in ("ours", "structured_streaming", "structured_streaming_at_interval"):
        assert repetition[side]["matches_reference"] is True
        assert repetition[side]["alerts"] == result["input"]["reference_alerts"]
    assert repetition["ratio_steady"] > 0 and repetition["ratio_steady_at_interval"] > 0
    # --max-files gives both baselines one size: one run serves both rows.
    assert repetition["structured_streaming"] == repetition["structured_streaming_at_interval"]
    assert "SS at 1 s batches (equal freshness)" in result["table"]


@pytest.mark.timeout(1600)
def test_the_joins_comparison_runs_once_at_a_tiny_scale_and_both_sides_pair_as_the_reference(
        tmp_path: Path) -> None:
    result = _bench("joins", tmp_path, "--records", "40000", "--keys", "300",
                    "--file-records", "5000", "--max-files", "2", "--repeat", "1")
    (repetition,) = result["runs"]
    pairs = result["input"]["reference_pairs"]
    assert pairs > 0
    for side in ("ours", "structured_streaming", "structured_streaming_at_interval"):
        assert repetition[side]["matches_reference"] is True
        assert repetition[side]["pairs"] == pairs
    # Both sides count the records both of their readers read.
    assert repetition["ours"]["records"] == 2 * 40_000
    assert repetition["ratio_steady"] > 0 and repetition["ratio_whole"] > 0
    assert "SS at 1 s batches (equal freshness)" in result["table"]


@pytest.mark.timeout(1600)
def test_the_windows_comparison_runs_once_at_a_tiny_scale_with_and_without_a_late_branch(
        tmp_path: Path) -> None:
    result = _bench("windows", tmp_path, "--records", "40000", "--keys", "300",
                    "--file-records", "5000", "--max-files", "2", "--repeat", "1",
                    "--late-branch")
    (repetition,) = result["runs"]
    for side in ("ours", "ours_late_branch", "structured_streaming",
                 "structured_streaming_at_interval"):
        assert repetition[side]["matches_reference"] is True
        assert repetition[side]["output_rows"] == result["input"]["reference_windows"]
    assert repetition["ratio_steady"] > 0 and repetition["ratio_steady_at_interval"] > 0
    # --max-files gives both baselines one size: one run serves both rows.
    assert repetition["structured_streaming"] == repetition["structured_streaming_at_interval"]
    assert "the branch's cost: with / without" in result["table"]
    assert "SS at 1 s batches (equal freshness)" in result["table"]


@pytest.mark.timeout(1600)
def test_the_realistic_comparison_runs_both_formats_once_at_a_tiny_scale_and_matches(
        tmp_path: Path) -> None:
    result = _bench("realistic", tmp_path, "--records", "60000", "--keys", "2000",
                    "--file-records", "5000", "--max-files", "2", "--repeat", "1")
    assert result["scale"]["formats"] == ["parquet", "jsonl"]
    for fmt in ("parquet", "jsonl"):
        (repetition,) = result["runs"][fmt]
        for side in ("ours", "structured_streaming", "structured_streaming_at_interval"):
            assert repetition[side]["matches_reference"] is True
            assert repetition[side]["records"] == 60000
        assert repetition["ours"]["checkpoints_completed"] > 0
        assert repetition["ratio_steady"] > 0 and repetition["ratio_whole"] > 0
        # End to end counts each side's start-up: ours from the command's start.
        ours = repetition["ours"]
        assert ours["start_up_seconds"] > 0 and ours["shut_down_seconds"] >= 0
        assert ours["end_to_end_seconds"] >= ours["start_up_seconds"] + ours["steady_seconds"]
        ss = repetition["structured_streaming"]
        assert ss["end_to_end_seconds"] > ss["start_up_seconds"] > 0
        assert repetition["ratio_end_to_end"] == pytest.approx(
            ss["end_to_end_seconds"] / ours["end_to_end_seconds"])
        # --max-files gives both baselines one size: one run serves both rows.
        assert repetition["structured_streaming_at_interval"] == \
            repetition["structured_streaming"]
        assert repetition["ratio_steady_at_interval"] == repetition["ratio_steady"]
        assert repetition["fraction_of_limit"] > 0
        assert result["in_process_limit"][fmt]["records"] == 60000
        assert result["input"]["bytes"][fmt] > 0
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    assert {"realistic_parquet_ratio_steady_vs_structured_streaming",
            "realistic_parquet_ratio_steady_vs_structured_streaming_at_interval",
            "realistic_jsonl_ratio_end_to_end_vs_structured_streaming",
            "realistic_jsonl_fraction_of_in_process_limit"} <= set(summary)
