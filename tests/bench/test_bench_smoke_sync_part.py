"""The synchronous-part benchmark still runs and writes every case with old and new side by side.

A tiny scale, once: it does not measure anything worth quoting, it keeps the
benchmark code from rotting between the rare full runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from paths import REPO


def test_the_sync_part_benchmark_runs_at_a_tiny_scale_and_reports_each_case(
        tmp_path: Path) -> None:
    env = {**os.environ, "BENCH_RESULTS": str(tmp_path / "results"),
           "BENCH_WORK": str(tmp_path / "work"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "sync-part", "--map-sizes", "10,100", "--puts", "20",
         "--aggregate-keys", "100,1000", "--sink-mb", "0.05", "--repeat", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result: dict[str, Any] = json.loads((tmp_path / "results" / "sync-part.json").read_text())

    assert [m["map_size"] for m in result["map_state"]] == [10, 100]
    assert [a["keys"] for a in result["aggregate"]] == [100, 1000]
    assert [s["interval_mb"] for s in result["files_sink"]] == [0.05]
    for case in [*result["map_state"], *result["aggregate"], *result["files_sink"]]:
        assert case["ratio"] > 0, case
    for case in result["map_state"]:
        assert case["old_put_us"] > 0 and case["new_put_us"] > 0
    for case in result["files_sink"]:
        assert case["background_ms"] > 0
    assert "files sink" in proc.stdout
