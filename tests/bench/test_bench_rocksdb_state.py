"""The rocksdb-state benchmark still runs and writes the figures its README quotes.

A tiny scale: it measures nothing, it keeps the benchmark (fill, incremental
checkpoints, the full-upload baseline, the restore, the results file) from rotting
between full runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from paths import REPO


def test_a_tiny_run_reports_incremental_and_full_uploads_and_a_restore(
        tmp_path: Path) -> None:
    env = {**os.environ, "BENCH_RESULTS": str(tmp_path / "results"),
           "BENCH_WORK": str(tmp_path / "work"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "rocksdb-state", "--size-gb", "0.01", "--intervals", "2"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result = json.loads((tmp_path / "results" / "rocksdb-state.json").read_text())
    first, *incremental, full = result["checkpoints"]
    assert not first["full"] and full["full"] and len(incremental) == 2
    assert all(c["uploaded_bytes"] < first["uploaded_bytes"] / 10 for c in incremental)
    assert full["uploaded_bytes"] >= full["state_bytes"] - 64 * 1024
    assert result["restore"]["files"] == full["referenced_files"]
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    assert summary["rocksdb-incremental-bytes"]["met"] is True
    assert not list((tmp_path / "work").glob("rocksdb-state-*"))
