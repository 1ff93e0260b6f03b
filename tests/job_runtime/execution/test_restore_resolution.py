"""Which checkpoint a driver starts from when the store's pointers are damaged.

Restore resolution walks the store's pointers with the store's own fallback walk,
so a damaged pointer is treated like an unreadable ``_metadata``: skipped and
named with ``onUnreadable: fallback``, an error without it, and never a reason
to start from empty state while the store says checkpoints were completed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_harness import write_completed_checkpoints

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.store.file import FileCheckpointStore, advance_attempt
from cjob_checkpoint.store.restore_report import RestoredCheckpoint
from cjob_spec.model import OnUnreadable
from job_runtime.errors import RestoreError
from job_runtime.execution.driver.driver_settings import DriverSettings
from job_runtime.execution.driver.restore import resolve_restore

JOB = "sums"
UID = "u1"


def settings(*, restore: str = "latest",
             on_unreadable: OnUnreadable = OnUnreadable.FALLBACK_TO_PREVIOUS,
             allow_foreign: bool = False) -> DriverSettings:
    return DriverSettings(job_name=JOB, job_uid=UID, entrypoint="jobs:build", attempt=2,
                          restore=restore, on_unreadable=on_unreadable,
                          allow_foreign_restore=allow_foreign)


def store_with(tmp_path: Path, ids: list[int]) -> tuple[FileCheckpointStore, CheckpointStorage]:
    directory = str(tmp_path / "store")
    advance_attempt(directory, 1)
    writer = FileCheckpointStore(directory, retained=3, attempt=1)
    storage = CheckpointStorage(f"file://{tmp_path}/ckpt", f"{JOB}-{UID}")
    write_completed_checkpoints(storage, writer, ids, job=f"{JOB}-{UID}")
    advance_attempt(directory, 2)
    return FileCheckpointStore(directory, retained=3, attempt=2), storage


def damage_pointer(tmp_path: Path, checkpoint_id: int) -> None:
    Path(tmp_path, "store", f"checkpointID-{checkpoint_id:019d}").write_text("{not json")


def test_a_damaged_newest_pointer_is_skipped_and_named_with_fallback(tmp_path: Path) -> None:
    store, storage = store_with(tmp_path, [1, 2])
    damage_pointer(tmp_path, 2)

    resolution = resolve_restore(settings=settings(), storage=storage, store=store)

    assert resolution.checkpoint is not None and resolution.checkpoint.checkpoint_id == 1
    assert [c.id for c in resolution.skipped] == [2]
    assert resolution.fallback_from == RestoredCheckpoint(id=2, path=resolution.skipped[0].path)
    assert any("checkpoint 2 is unreadable" in note for note in resolution.notes)


def test_a_damaged_newest_pointer_fails_the_restore_without_fallback(tmp_path: Path) -> None:
    store, storage = store_with(tmp_path, [1, 2])
    damage_pointer(tmp_path, 2)

    with pytest.raises(RestoreError, match="not a valid checkpoint pointer"):
        resolve_restore(settings=settings(on_unreadable=OnUnreadable.FAIL), storage=storage, store=store)


def test_a_store_whose_only_pointer_is_damaged_never_restarts_from_empty_state(
        tmp_path: Path) -> None:
    store, storage = store_with(tmp_path, [1])
    damage_pointer(tmp_path, 1)

    with pytest.raises(RestoreError, match="no readable checkpoint to fall back to"):
        resolve_restore(settings=settings(), storage=storage, store=store)


def test_a_requested_checkpoint_is_restored_past_a_damaged_older_pointer(tmp_path: Path) -> None:
    store, storage = store_with(tmp_path, [1, 2])
    damage_pointer(tmp_path, 1)

    resolution = resolve_restore(settings=settings(restore="2", on_unreadable=OnUnreadable.FAIL),
                                 storage=storage, store=store)

    assert resolution.checkpoint is not None and resolution.checkpoint.checkpoint_id == 2
    assert resolution.skipped == ()


class TestForeignRestore:
    """``allowForeignJob`` continues another job's checkpoint, and withdraws that job's
    output newer than it: the job must be the one whose directory holds the file."""

    def foreign_checkpoint(self, tmp_path: Path, *, directory: str, says: str) -> str:
        other = CheckpointStorage(f"file://{tmp_path}/ckpt", directory)
        write_completed_checkpoints(other, FileCheckpointStore(
            str(tmp_path / "other-store"), retained=3, attempt=1), [2], job=says)
        return other.metadata_uri(2)

    def test_a_checkpoint_of_the_job_whose_directory_holds_it_is_restored(
            self, tmp_path: Path) -> None:
        store, storage = store_with(tmp_path, [])
        path = self.foreign_checkpoint(tmp_path, directory=f"{JOB}-old", says=f"{JOB}-old")
        resolution = resolve_restore(
            settings=settings(restore=path, allow_foreign=True), storage=storage, store=store)
        assert resolution.origin_job == f"{JOB}-old"

    def test_metadata_naming_another_job_than_its_directory_is_refused(
            self, tmp_path: Path) -> None:
        """Else a crafted file in one job's directory would withdraw a third job's
        committed output."""
        store, storage = store_with(tmp_path, [])
        path = self.foreign_checkpoint(tmp_path, directory=f"{JOB}-old", says="payroll-u7")
        with pytest.raises(RestoreError, match=r"names job 'payroll-u7' but lies in the "
                                               r"directory of job 'sums-old'"):
            resolve_restore(settings=settings(restore=path, allow_foreign=True),
                            storage=storage, store=store)


def test_an_older_checkpoint_gives_way_to_the_newest_unless_a_redeploy_asks_for_it(
        tmp_path: Path) -> None:
    store, storage = store_with(tmp_path, [1, 2, 3])

    plain = resolve_restore(settings=settings(restore="1"), storage=storage, store=store)
    assert plain.checkpoint is not None and plain.checkpoint.checkpoint_id == 3

    exact = DriverSettings(job_name=JOB, job_uid=UID, entrypoint="jobs:build", attempt=2,
                           restore="1", restore_exact=True)
    redeployed = resolve_restore(settings=exact, storage=storage, store=store)
    assert redeployed.checkpoint is not None and redeployed.checkpoint.checkpoint_id == 1

    by_path = DriverSettings(job_name=JOB, job_uid=UID, entrypoint="jobs:build", attempt=2,
                             restore=storage.metadata_uri(2), restore_exact=True)
    resolved = resolve_restore(settings=by_path, storage=storage, store=store)
    assert resolved.checkpoint is not None and resolved.checkpoint.checkpoint_id == 2
