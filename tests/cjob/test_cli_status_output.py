"""``cjob status`` and ``cjob checkpoints list`` print a local job as ``kubectl cjob``
prints one on a cluster (``cjob.views``), and as JSON or YAML for scripts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from cjob.cli import main
from cjob_checkpoint.store.completed_store import CompletedCheckpoint
from cjob_checkpoint.store.file import FileCheckpointStore, advance_attempt

STATUS = {"phase": "Running", "reason": "Restarted", "attempt": 2, "restarts": 1,
          "latestCheckpoint": {"id": 4, "path": "file:///c/chk-4/_metadata",
                               "completedAt": "2026-11-30T11:59:30Z", "sizeBytes": 2048},
          "restoredFrom": {"id": 3, "path": "file:///c/chk-3/_metadata"}}


def local_job(tmp_path: Path) -> Path:
    job = tmp_path / "clicks"
    job.mkdir()
    (job / "status.json").write_text(json.dumps(STATUS))
    return tmp_path


def test_the_status_has_the_plugins_fields_and_yaml_gives_the_status_back(
        tmp_path: Path, capsys: Any) -> None:
    state = local_job(tmp_path)
    assert main(["status", "clicks", "--state-dir", str(state)]) == 0
    lines = dict(line.split(":", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["Phase"].strip() == "Running (Restarted)"
    assert lines["Latest checkpoint"].strip().startswith("4 (")
    assert lines["Restored from"].strip() == "checkpoint 3 (file:///c/chk-3/_metadata)"
    assert main(["status", "clicks", "--state-dir", str(state), "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == STATUS


def test_the_checkpoints_list_the_retained_pointers_in_yaml_too(
        tmp_path: Path, capsys: Any) -> None:
    state = local_job(tmp_path)
    store = state / "clicks" / "store"
    advance_attempt(str(store), 1)
    writer = FileCheckpointStore(str(store), retained=3, attempt=1)
    for checkpoint_id in (1, 2):
        writer.add_checkpoint_and_subsume_oldest(CompletedCheckpoint(
            checkpoint_id=checkpoint_id, metadata_path=f"file:///c/chk-{checkpoint_id}/_metadata",
            timestamp=1_800_000_000.0 + checkpoint_id, size_bytes=10, attempt=1),
            discard=lambda checkpoint: None)
    assert main(["checkpoints", "list", "clicks", "--state-dir", str(state), "-o", "yaml"]) == 0
    listed = yaml.safe_load(capsys.readouterr().out)
    assert [c["id"] for c in listed] == [1, 2]
    assert main(["checkpoints", "list", "clicks", "--state-dir", str(state)]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["ID", "COMPLETED", "AGE", "SIZE", "ATTEMPT", "PATH"]
    assert [row.split()[0] for row in rows] == ["1", "2"]
