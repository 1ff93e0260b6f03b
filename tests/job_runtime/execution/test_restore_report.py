"""What a driver restored is recorded in its store, for the operator's ``status.restoredFrom``.

The driver resolves the checkpoint to start from and then records it for its attempt,
with the checkpoint it fell back from when the newest one was unreadable. The record
follows the store's fencing rule: only the current attempt may write it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runtime_harness import write_completed_checkpoints

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.store.completed_store import FencedError
from cjob_checkpoint.store.file import FileCheckpointStore, advance_attempt
from cjob_checkpoint.store.memory import InMemoryCheckpointStore
from cjob_checkpoint.store.restore_report import (
    MAX_REPORT_BYTES,
    RestoredCheckpoint,
    RestoreReport,
    UnreadableRestoreReportError,
    clip_dropped,
)
from cjob_spec.model import OnUnreadable
from job_runtime.execution.driver.driver_settings import DriverSettings
from job_runtime.execution.driver.restore import record_restore, resolve_restore

JOB = "sums"
UID = "u1"


def settings(*, attempt: int,
             on_unreadable: OnUnreadable = OnUnreadable.FALLBACK_TO_PREVIOUS) -> DriverSettings:
    return DriverSettings(job_name=JOB, job_uid=UID, entrypoint="jobs:build", attempt=attempt,
                          on_unreadable=on_unreadable)


def storage_with(tmp_path: Path, store: FileCheckpointStore, ids: list[int]) -> CheckpointStorage:
    storage = CheckpointStorage(f"file://{tmp_path}/ckpt", f"{JOB}-{UID}")
    write_completed_checkpoints(storage, store, ids, job=f"{JOB}-{UID}")
    return storage


def test_a_restore_that_fell_back_from_an_unreadable_checkpoint_records_both(
        tmp_path: Path) -> None:
    directory = str(tmp_path / "store")
    advance_attempt(directory, 1)
    storage = storage_with(tmp_path, FileCheckpointStore(directory, retained=3, attempt=1), [1, 2])
    newest = Path(storage.metadata_uri(2).removeprefix("file://"))
    newest.write_bytes(b"damaged")
    advance_attempt(directory, 2)
    store = FileCheckpointStore(directory, retained=3, attempt=2)

    resolution = resolve_restore(settings=settings(attempt=2), storage=storage, store=store)
    assert record_restore(store=store, attempt=2, resolution=resolution)

    report = FileCheckpointStore(directory, retained=3, attempt=2).restore_report()
    assert report == RestoreReport(
        attempt=2,
        checkpoint=RestoredCheckpoint(id=1, path=storage.metadata_uri(1)),
        fallback_from=RestoredCheckpoint(id=2, path=storage.metadata_uri(2)),
    )


def test_a_restore_of_the_newest_checkpoint_records_no_fallback(tmp_path: Path) -> None:
    directory = str(tmp_path / "store")
    advance_attempt(directory, 1)
    storage = storage_with(tmp_path, FileCheckpointStore(directory, retained=3, attempt=1), [1, 2])
    store = FileCheckpointStore(directory, retained=3, attempt=1)
    resolution = resolve_restore(settings=settings(attempt=1), storage=storage, store=store)
    record_restore(store=store, attempt=1, resolution=resolution)
    assert store.restore_report() == RestoreReport(
        attempt=1, checkpoint=RestoredCheckpoint(id=2, path=storage.metadata_uri(2)),
        fallback_from=None)


def test_an_empty_start_is_recorded_as_a_report_without_a_checkpoint() -> None:
    store = InMemoryCheckpointStore(retained=1)
    storage = CheckpointStorage("file:///nowhere", f"{JOB}-{UID}")
    resolution = resolve_restore(settings=settings(attempt=3), storage=storage, store=store)
    assert record_restore(store=store, attempt=3, resolution=resolution)
    assert store.restore_report() == RestoreReport(attempt=3, checkpoint=None, fallback_from=None)


def test_an_older_attempt_may_not_record_what_it_restored(tmp_path: Path) -> None:
    directory = str(tmp_path / "store")
    advance_attempt(directory, 2)
    zombie = FileCheckpointStore(directory, retained=3, attempt=1)
    with pytest.raises(FencedError):
        zombie.record_restore(RestoreReport(attempt=1, checkpoint=None, fallback_from=None))
    assert zombie.restore_report() is None


def test_the_report_is_small_typed_versioned_json() -> None:
    report = RestoreReport(attempt=4, checkpoint=RestoredCheckpoint(id=9, path="s3://b/chk-9/_metadata"),
                           fallback_from=RestoredCheckpoint(id=10, path="s3://b/chk-10/_metadata"))
    text = report.to_json()
    assert json.loads(text) == {
        "version": 1, "attempt": 4, "id": 9, "path": "s3://b/chk-9/_metadata",
        "fallbackFrom": {"id": 10, "path": "s3://b/chk-10/_metadata"}}
    assert RestoreReport.from_json(text) == report
    assert len(text.encode()) < MAX_REPORT_BYTES


@pytest.mark.parametrize("text", [
    '{"version": 3, "attempt": 1, "id": null, "path": null, "fallbackFrom": null}',
    '{"version": 2, "attempt": 1, "id": null, "path": null, "fallbackFrom": null, '
    '"dropped": [3]}',
    '{"attempt": 1}',
    "not json",
    '{"version": 1, "attempt": "one", "id": null, "path": null, "fallbackFrom": null}',
])
def test_a_report_of_another_version_or_shape_is_refused_rather_than_guessed(text: str) -> None:
    with pytest.raises(UnreadableRestoreReportError):
        RestoreReport.from_json(text)


def test_dropped_state_makes_a_version_two_report_and_a_long_list_is_clipped() -> None:
    report = RestoreReport(attempt=2, checkpoint=RestoredCheckpoint(id=9, path="s3://b/chk-9/_metadata"),
                           dropped=("operator 'sum' holds state, but ...",))
    data = json.loads(report.to_json())
    assert data["version"] == 2 and data["dropped"] == ["operator 'sum' holds state, but ..."]
    assert RestoreReport.from_json(report.to_json()) == report
    many = clip_dropped(tuple(f"operator 'op-{i}' holds state: " + "x" * 80 for i in range(200)))
    assert many[-1].startswith("and ") and many[-1].endswith(" more")
    huge = RestoreReport(attempt=2, checkpoint=None, dropped=many)
    assert len(huge.to_json().encode()) < MAX_REPORT_BYTES
