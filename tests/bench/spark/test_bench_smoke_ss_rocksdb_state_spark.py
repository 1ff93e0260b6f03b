"""The Spark-tier tests of test_bench_smoke_ss_rocksdb_state.py: they start a real driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from paths import REPO

KEYS = 4000
VALUE_BYTES = 1024




@pytest.mark.timeout(1500)
def test_at_a_tiny_scale_a_checkpoint_after_the_fill_writes_far_less_than_the_state(
        tmp_path: Path) -> None:
    env = {**os.environ, "BENCH_RESULTS": str(tmp_path / "results"),
           "BENCH_WORK": str(tmp_path / "work"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "ss-rocksdb-state", "--keys", str(KEYS),
         "--value-bytes", str(VALUE_BYTES), "--fill-keys-per-batch", "2000",
         "--update-batches", "3", "--parallelism", "2", "--floor-repeat", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1400, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result: dict[str, Any] = json.loads(
        (tmp_path / "results" / "ss-rocksdb-state.json").read_text())
    summary = result["summary"]

    assert [b["phase"] for b in result["batches"]] == ["fill"] * 2 + ["update"] * 3
    assert summary["fill"]["state_rows"] == KEYS
    assert summary["keys_per_update"] == KEYS // 100
    state_bytes = summary["fill"]["checkpoint_bytes"]
    assert state_bytes >= KEYS * VALUE_BYTES
    per_checkpoint = summary["checkpoint_bytes_per_batch"]["median"]
    assert summary["changelog_bytes_per_batch"]["median"] >= KEYS // 100 * VALUE_BYTES
    assert per_checkpoint < state_bytes / 10, (per_checkpoint, state_bytes)
    assert summary["commit_ms"]["median"] >= 0
    assert summary["batch_ms"]["median"] > 0

    assert [r["kind"] for r in result["restores"]] == ["same-session", "new-process"]
    for restore in result["restores"]:
        assert restore["batch"]["state_rows"] == KEYS
        assert restore["seconds_to_first_batch"] > 0
    assert result["restores"][1]["seconds_from_launch"] > \
        result["restores"][1]["seconds_to_first_batch"]

    assert result["floor"]["checkpoint_seconds"] > 0
    assert result["floor"]["state_seconds"] > 0
    assert isinstance(result["metrics_missing"], list)
    assert "bytes per checkpoint" in proc.stdout
