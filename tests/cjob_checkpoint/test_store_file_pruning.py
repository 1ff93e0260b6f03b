"""The file store when pruning fails after the new pointer is committed (disk full).

The committed pointer makes the new checkpoint the newest restorable one, so a
failure of the pruning that follows must not escape as a failed add: the caller
would discard the data that pointer names. It is logged, counted, and retried by
the next add.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from cjob_checkpoint.store import file as file_store
from cjob_checkpoint.store.completed_store import CompletedCheckpoint
from cjob_checkpoint.store.file import FileCheckpointStore


def checkpoint(checkpoint_id: int) -> CompletedCheckpoint:
    return CompletedCheckpoint(checkpoint_id=checkpoint_id,
                               metadata_path=f"file:///ckpt/job-uid/chk-{checkpoint_id}/_metadata",
                               timestamp=float(checkpoint_id))


@pytest.fixture
def disk_full_for_markers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """ENOSPC for every discard marker: the pointer fits, the next small file does not."""
    refused: list[str] = []
    write = file_store._write_text

    def full(path: str, text: str) -> None:
        if path.endswith(file_store.MARKER_SUFFIX):
            refused.append(path)
            raise OSError(errno.ENOSPC, "No space left on device", path)
        write(path, text)

    monkeypatch.setattr(file_store, "_write_text", full)
    return refused


class TestADiskThatFillsUpWhilePruning:
    def test_the_add_succeeds_and_the_new_checkpoint_is_the_latest(
            self, tmp_path: Path, disk_full_for_markers: list[str]) -> None:
        discarded: list[int] = []
        store = FileCheckpointStore(str(tmp_path), retained=1, attempt=1)
        store.add_checkpoint_and_subsume_oldest(checkpoint(1),
                                                discard=lambda c: discarded.append(c.checkpoint_id))

        assert store.add_checkpoint_and_subsume_oldest(
            checkpoint(2), discard=lambda c: discarded.append(c.checkpoint_id)) == []

        assert disk_full_for_markers, "the simulated full disk was never hit"
        latest = store.latest()
        assert latest is not None and latest.checkpoint_id == 2
        assert discarded == []
        assert store.prune_failures == 1

    def test_the_next_add_after_space_was_freed_prunes_what_was_left(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            disk_full_for_markers: list[str]) -> None:
        discarded: list[int] = []
        store = FileCheckpointStore(str(tmp_path), retained=1, attempt=1)
        for checkpoint_id in (1, 2):
            store.add_checkpoint_and_subsume_oldest(
                checkpoint(checkpoint_id), discard=lambda c: discarded.append(c.checkpoint_id))
        monkeypatch.undo()

        store.add_checkpoint_and_subsume_oldest(
            checkpoint(3), discard=lambda c: discarded.append(c.checkpoint_id))

        assert discarded == [1, 2]
        assert [c.checkpoint_id for c in store.all()] == [3]
