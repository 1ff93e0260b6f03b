"""What ``cjob`` and ``kubectl cjob`` print: kubectl's ages, tables and fields, one
formatting for a job on one machine and on a cluster."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from cjob import views
from cjob_checkpoint.store.completed_store import CompletedCheckpoint

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("seconds, said", [
    (0, "0s"), (45, "45s"), (119, "119s"), (200, "3m20s"), (300, "5m"), (47 * 60, "47m"),
    (5 * 3600 + 600, "5h10m"), (30 * 3600, "30h"), (3 * 86400 + 4 * 3600, "3d4h"),
    (12 * 86400, "12d"), (800 * 86400, "2y70d"), (-5, "0s")])
def test_ages_read_as_kubectl_writes_them(seconds: int, said: str) -> None:
    assert views.age(NOW - timedelta(seconds=seconds), now=NOW) == said


def test_api_times_with_fractions_offsets_or_no_zone_all_parse() -> None:
    expected = datetime(2026, 11, 30, 11, 59, tzinfo=UTC)
    assert views.parse_time("2026-11-30T11:59:00Z") == expected
    assert views.parse_time("2026-11-30T11:59:00.000000+00:00") == expected
    assert views.parse_time("2026-11-30T11:59:00") == expected
    assert views.parse_time("yesterday") is None
    assert views.parse_time(None) is None


def test_a_table_pads_columns_three_spaces_apart_and_says_none_for_missing_cells() -> None:
    text = views.table(("NAME", "PHASE"), [("clicks", "Running"), ("a", None)])
    assert text.splitlines() == ["NAME     PHASE", "clicks   Running", "a        <none>"]


@pytest.mark.parametrize("size_bytes, said", [
    (512, "512"), (2048, "2.0Ki"), (12_900_000, "12.3Mi"), (3 * 2**40, "3.0Ti"),
    (None, None)])
def test_sizes_use_binary_suffixes(size_bytes: int | None, said: str | None) -> None:
    assert views.size(size_bytes) == said


def test_the_checkpoint_table_lists_oldest_first_with_age_size_attempt_and_path() -> None:
    checkpoints = [
        CompletedCheckpoint(checkpoint_id=8, metadata_path="s3://b/j/chk-8/_metadata",
                            timestamp=(NOW - timedelta(seconds=5)).timestamp(),
                            size_bytes=4096, attempt=2),
        CompletedCheckpoint(checkpoint_id=7, metadata_path="s3://b/j/chk-7/_metadata",
                            timestamp=(NOW - timedelta(seconds=65)).timestamp(),
                            size_bytes=100, attempt=1)]
    header, first, second = views.checkpoint_table(checkpoints, now=NOW).splitlines()
    assert header.split() == ["ID", "COMPLETED", "AGE", "SIZE", "ATTEMPT", "PATH"]
    assert first.split() == ["7", "2026-11-30T11:58:55Z", "65s", "100", "1",
                             "s3://b/j/chk-7/_metadata"]
    assert second.split()[:5] == ["8", "2026-11-30T11:59:55Z", "5s", "4.0Ki", "2"]
    data = views.checkpoint_data(checkpoints)
    assert [c["id"] for c in data] == [7, 8]
    assert data[0] == {"id": 7, "path": "s3://b/j/chk-7/_metadata",
                       "timestamp": checkpoints[1].timestamp, "sizeBytes": 100, "attempt": 1}


def test_a_status_reads_the_same_locally_and_on_a_cluster_which_adds_the_namespace() -> None:
    status = {"phase": "Running", "reason": "Restarted", "attempt": 3, "restarts": 1,
              "parallelism": 2, "driverPod": "clicks-driver-3",
              "latestCheckpoint": {"id": 12, "path": "file:///c/chk-12/_metadata",
                                   "completedAt": "2026-11-30T11:59:30Z",
                                   "sizeBytes": 2048},
              "restoredFrom": {"id": 9, "path": "file:///c/chk-9/_metadata"},
              "lastFailure": {"reason": "DriverLost", "message": "node gone", "attempt": 2}}
    local = dict(line.split(":", 1) for line in
                 views.status_fields(name="clicks", status=status, now=NOW).splitlines())
    assert {k: v.strip() for k, v in local.items()} == {
        "Name": "clicks", "Phase": "Running (Restarted)", "Attempt": "3", "Restarts": "1",
        "Parallelism": "2", "Driver pod": "clicks-driver-3",
        "Latest checkpoint": "12 (30s ago, 2.0Ki)",
        "Checkpoint path": "file:///c/chk-12/_metadata",
        "Restored from": "checkpoint 9 (file:///c/chk-9/_metadata)",
        "Last failure": "DriverLost: node gone (attempt 2)", "Message": "-"}
    remote = views.status_fields(name="clicks", namespace="jobs", status=status, now=NOW)
    assert remote.splitlines()[1].split() == ["Namespace:", "jobs"]
    assert remote.splitlines()[2:] == views.status_fields(
        name="clicks", status=status, now=NOW).splitlines()[1:]


def test_a_job_with_no_status_yet_prints_dashes_not_a_traceback() -> None:
    text = views.status_fields(name="new", status={}, now=NOW)
    assert "Latest checkpoint:  -" in text
    assert "Phase:" in text


def test_json_and_yaml_print_the_data_unchanged() -> None:
    data = {"b": [1, {"c": None}], "a": "x"}
    assert json.loads(views.dump(data, output=views.Output.JSON)) == data
    assert yaml.safe_load(views.dump(data, output=views.Output.YAML)) == data


def test_events_are_dated_by_their_series_then_last_timestamp_then_event_time() -> None:
    assert views.event_time({"series": {"lastObservedTime": "2026-11-30T11:00:00Z"},
                             "lastTimestamp": "2026-11-30T10:00:00Z"}) == \
        datetime(2026, 11, 30, 11, tzinfo=UTC)
    assert views.event_time({"lastTimestamp": None,
                             "eventTime": "2026-11-30T09:00:00.000000Z"}) == \
        datetime(2026, 11, 30, 9, tzinfo=UTC)
    table = views.events_table([{"type": "Normal", "reason": "CheckpointRequested",
                                 "message": "manual checkpoint requested (n)",
                                 "lastTimestamp": "2026-11-30T11:59:00Z"}], now=NOW)
    assert table.splitlines()[1].split()[:3] == ["60s", "Normal", "CheckpointRequested"]
