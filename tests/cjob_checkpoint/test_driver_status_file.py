"""The driver's status file is a typed, versioned document ``cjob run`` reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cjob_checkpoint.driver_status import (
    CheckpointCounts,
    DriverStatus,
    LatestCheckpoint,
    RestoredFrom,
    StatusFileError,
    read_status_file,
    write_status_file,
)

STATUS = DriverStatus(
    state="running", pid=42, updated_at=1754000000.5, attempt=2, epoch=7, subtask_restarts=1,
    records_in=1200, records_out=1100,
    checkpoints=CheckpointCounts(completed=4, failed=1, duration_ms_p50=12.0,
                                 duration_ms_p99=30.5, sync_ms_p99=1.0, alignment_ms_p99=2.0,
                                 recent=({"checkpoint_id": 4, "status": "COMPLETED"},)),
    latest_checkpoint=LatestCheckpoint(id=4, path="file:///c/job-u/chk-4/_metadata",
                                       completed_at=1754000000.25, size_bytes=2048),
    restored_from=RestoredFrom(id=2, path="file:///c/job-u/chk-2/_metadata"),
    timeline={"driverStartedAt": 1753999990.0, "sparkReadyAt": 1753999995.0},
    rejected_connections=0, fallback_notes=("checkpoint 3 is unreadable (damaged)",),
    watermark=1_753_999_900_000, late_records=3)


def test_what_the_driver_writes_the_runner_reads_back_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "attempt-2.progress.json"
    write_status_file(str(path), STATUS)
    assert read_status_file(path) == STATUS


def test_the_file_keeps_the_camel_case_keys_readers_and_tests_know(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    write_status_file(str(path), STATUS)
    data = json.loads(path.read_text())
    assert data["version"] == 1
    assert data["restoredFrom"] == {"id": 2, "path": "file:///c/job-u/chk-2/_metadata"}
    assert data["latestCheckpoint"]["sizeBytes"] == 2048
    assert data["checkpoints"]["completed"] == 4
    assert data["fallbackNotes"] == ["checkpoint 3 is unreadable (damaged)"]
    assert "checkpointHistory" not in data
    assert (data["watermark"], data["lateRecords"]) == (1_753_999_900_000, 3)


def test_a_file_of_a_driver_without_event_time_fields_reads_as_no_watermark(
        tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    write_status_file(str(path), STATUS)
    data = json.loads(path.read_text())
    del data["watermark"], data["lateRecords"]
    path.write_text(json.dumps(data))
    read = read_status_file(path)
    assert (read.watermark, read.late_records) == (None, 0)


def test_a_file_written_before_the_version_field_existed_reads_as_version_one(
        tmp_path: Path) -> None:
    data = STATUS.to_json()
    del data["version"]
    path = tmp_path / "status.json"
    path.write_text(json.dumps(data))
    assert read_status_file(path) == STATUS


def test_a_newer_version_or_a_damaged_file_is_refused_with_a_sentence(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    path.write_text(json.dumps({**STATUS.to_json(), "version": 2}))
    with pytest.raises(StatusFileError, match="version 2 is not supported"):
        read_status_file(path)
    path.write_text(json.dumps({**STATUS.to_json(), "recordsIn": "many"}))
    with pytest.raises(StatusFileError, match=r"'recordsIn'.*must be an integer"):
        read_status_file(path)
    path.write_text('{"state": "run')
    with pytest.raises(StatusFileError, match="not valid JSON"):
        read_status_file(path)
