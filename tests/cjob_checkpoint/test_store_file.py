"""The file store: retention, two-phase discard, fencing, races between processes."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.store.completed_store import (
    AmbiguousWriteError,
    CompletedCheckpoint,
    FencedError,
    JobOutcome,
)
from cjob_checkpoint.store.file import (
    CorruptPointerError,
    CorruptStoreFileError,
    FileCheckpointIdCounter,
    FileCheckpointStore,
    StoreClosedError,
    advance_attempt,
    list_checkpoints,
    read_attempt,
)
from cjob_checkpoint.store.retention import InvalidRetentionError

JOB = "wordcount-0a1b2c"
_fork = multiprocessing.get_context("fork")


def _checkpoint(storage: CheckpointStorage, checkpoint_id: int) -> CompletedCheckpoint:
    """A real checkpoint: state files, then ``_metadata``, then the pointer."""
    storage.write_state(checkpoint_id, "count", 0, f"state {checkpoint_id}".encode())
    path = storage.write_metadata(checkpoint_id, b"{}")
    return CompletedCheckpoint(checkpoint_id=checkpoint_id, metadata_path=path,
                               timestamp=time.time(), size_bytes=9)


@pytest.fixture
def storage(tmp_path: Path) -> CheckpointStorage:
    return CheckpointStorage(str(tmp_path / "ckpt"), JOB)


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    return str(tmp_path / "store")


def _ids(checkpoints: list[CompletedCheckpoint]) -> list[int]:
    return [c.checkpoint_id for c in checkpoints]


class TestRetention:
    @pytest.mark.parametrize("retained", [1, 10])
    def test_only_the_newest_retained_checkpoints_and_their_data_remain(
        self, storage: CheckpointStorage, store_dir: str, retained: int
    ) -> None:
        store = FileCheckpointStore(store_dir, retained=retained, attempt=1)
        discarded: list[int] = []
        for checkpoint_id in range(1, 16):
            gone = store.add_checkpoint_and_subsume_oldest(
                _checkpoint(storage, checkpoint_id), discard=storage.discard)
            discarded += _ids(gone)

        expected = list(range(16 - retained, 16))
        assert _ids(store.all()) == expected
        assert store.latest() is not None and store.latest().checkpoint_id == 15  # type: ignore[union-attr]
        assert storage.list_completed_ids() == expected
        assert discarded == list(range(1, 16 - retained))

    def test_pointers_are_json_files_named_by_zero_padded_id(
        self, storage: CheckpointStorage, store_dir: str
    ) -> None:
        checkpoint = _checkpoint(storage, 42)
        FileCheckpointStore(store_dir, retained=1, attempt=1).add_checkpoint_and_subsume_oldest(
            checkpoint, discard=storage.discard)

        text = Path(store_dir, "checkpointID-0000000000000000042").read_text()
        assert CompletedCheckpoint.from_json(text) == checkpoint
        assert json.loads(text)["path"] == checkpoint.metadata_path

    def test_the_newest_checkpoint_is_never_pruned_even_when_an_older_one_arrives_late(
        self, storage: CheckpointStorage, store_dir: str
    ) -> None:
        store = FileCheckpointStore(store_dir, retained=1, attempt=1)
        store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 5), discard=storage.discard)

        gone = store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 4),
                                                       discard=storage.discard)

        assert _ids(gone) == [4]
        assert _ids(store.all()) == [5]
        assert storage.list_completed_ids() == [5]

    @pytest.mark.parametrize("retained", [0, -1, True])
    def test_retention_must_keep_at_least_one(self, store_dir: str, retained: int) -> None:
        with pytest.raises(InvalidRetentionError):
            FileCheckpointStore(store_dir, retained=retained, attempt=1)

    def test_an_empty_or_missing_store_has_no_latest(self, store_dir: str) -> None:
        store = FileCheckpointStore(store_dir, retained=3, attempt=1)
        assert store.latest() is None
        assert list_checkpoints(store_dir) == []


    def test_a_pointer_that_cannot_be_committed_is_ambiguous_and_prunes_nothing(
        self, storage: CheckpointStorage, store_dir: str
    ) -> None:
        store = FileCheckpointStore(store_dir, retained=1, attempt=1)
        store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 1), discard=storage.discard)
        blocker = Path(store_dir, "checkpointID-0000000000000000002")
        blocker.mkdir()
        (blocker / "occupied").write_text("x")

        with pytest.raises(AmbiguousWriteError, match="checkpoint 2"):
            store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 2),
                                                    discard=storage.discard)

        assert storage.list_completed_ids() == [1, 2]
        assert _ids(store.all(skip_corrupt=True)) == [1]
        with pytest.raises(CorruptPointerError, match="directory"):
            store.all()


class TestTwoPhaseDiscard:
    def test_a_failing_discard_keeps_the_data_and_the_marked_pointer_until_it_succeeds(
        self, storage: CheckpointStorage, store_dir: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        store = FileCheckpointStore(store_dir, retained=1, attempt=1)
        store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 1), discard=storage.discard)

        def broken(checkpoint: CompletedCheckpoint) -> None:
            raise OSError("storage is read-only right now")

        with caplog.at_level(logging.WARNING):
            gone = store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 2),
                                                           discard=broken)

        assert gone == []
        assert "checkpoint 1" in caplog.text and "read-only" in caplog.text
        assert _ids(store.all()) == [2]
        assert store.marked_for_discard() == [1]
        assert storage.list_completed_ids() == [1, 2]

        gone = store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 3),
                                                       discard=storage.discard)

        assert sorted(_ids(gone)) == [1, 2]
        assert store.marked_for_discard() == []
        assert storage.list_completed_ids() == [3]

    def test_a_crash_between_mark_and_delete_leaves_a_readable_store_cleaned_up_later(
        self, storage: CheckpointStorage, store_dir: str
    ) -> None:
        store = FileCheckpointStore(store_dir, retained=1, attempt=1)
        store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 1), discard=storage.discard)
        second = _checkpoint(storage, 2)

        process = _fork.Process(target=_add_then_crash_in_discard, args=(store_dir, second))
        process.start()
        process.join(30)

        assert process.exitcode == 17
        survivor = FileCheckpointStore(store_dir, retained=1, attempt=1)
        assert _ids(survivor.all()) == [2]
        assert survivor.marked_for_discard() == [1]
        assert storage.list_completed_ids() == [1, 2]

        survivor.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 3),
                                                   discard=storage.discard)

        assert _ids(survivor.all()) == [3]
        assert survivor.marked_for_discard() == []
        assert storage.list_completed_ids() == [3]
        assert sorted(os.listdir(store_dir)) == [".lock", "attempt", "checkpointID-"
                                                 "0000000000000000003"]


def _add_then_crash_in_discard(store_dir: str, checkpoint: CompletedCheckpoint) -> None:
    def crash(_: CompletedCheckpoint) -> None:
        os._exit(17)

    FileCheckpointStore(store_dir, retained=1, attempt=1).add_checkpoint_and_subsume_oldest(
        checkpoint, discard=crash)


class TestFencing:
    def test_a_writer_of_an_older_attempt_is_refused_and_changes_nothing(
        self, storage: CheckpointStorage, store_dir: str
    ) -> None:
        advance_attempt(store_dir, 1)
        zombie = FileCheckpointStore(store_dir, retained=1, attempt=1)
        zombie.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 1), discard=storage.discard)

        advance_attempt(store_dir, 2)

        with pytest.raises(FencedError) as caught:
            zombie.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 2),
                                                     discard=storage.discard)
        assert (caught.value.attempt, caught.value.current_attempt) == (1, 2)
        assert _ids(list_checkpoints(store_dir)) == [1]
        assert storage.list_completed_ids() == [1, 2]  # data of the refused add is not deleted
        with pytest.raises(FencedError):
            FileCheckpointIdCounter(store_dir, attempt=1).get_and_increment()

    def test_the_attempt_never_goes_backwards(self, store_dir: str) -> None:
        assert read_attempt(store_dir) == 0
        advance_attempt(store_dir, 3)
        advance_attempt(store_dir, 3)

        with pytest.raises(FencedError):
            advance_attempt(store_dir, 2)
        assert read_attempt(store_dir) == 3

    def test_a_writer_of_a_newer_attempt_takes_over(
        self, storage: CheckpointStorage, store_dir: str
    ) -> None:
        advance_attempt(store_dir, 1)
        FileCheckpointStore(store_dir, retained=2, attempt=4).add_checkpoint_and_subsume_oldest(
            _checkpoint(storage, 1), discard=storage.discard)

        assert read_attempt(store_dir) == 4
        with pytest.raises(FencedError):
            FileCheckpointStore(store_dir, retained=2, attempt=3).add_checkpoint_and_subsume_oldest(
                _checkpoint(storage, 2), discard=storage.discard)


class TestConcurrentProcesses:
    def test_two_processes_adding_at_once_lose_no_pointer_and_share_the_id_sequence(
        self, tmp_path: Path, store_dir: str
    ) -> None:
        root = str(tmp_path / "ckpt")
        processes = [_fork.Process(target=_add_many, args=(store_dir, root, 25, 1000))
                     for _ in range(2)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)

        assert [p.exitcode for p in processes] == [0, 0]
        assert _ids(list_checkpoints(store_dir)) == list(range(1, 51))
        assert FileCheckpointIdCounter(store_dir, attempt=1).get() == 51

    def test_two_processes_pruning_at_once_keep_exactly_the_newest(
        self, tmp_path: Path, store_dir: str
    ) -> None:
        root = str(tmp_path / "ckpt")
        processes = [_fork.Process(target=_add_many, args=(store_dir, root, 20, 3))
                     for _ in range(2)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)

        assert [p.exitcode for p in processes] == [0, 0]
        assert _ids(list_checkpoints(store_dir)) == [38, 39, 40]
        assert CheckpointStorage(root, JOB).list_completed_ids() == [38, 39, 40]


def _add_many(store_dir: str, root: str, count: int, retained: int) -> None:
    storage = CheckpointStorage(root, JOB)
    counter = FileCheckpointIdCounter(store_dir, attempt=1)
    store = FileCheckpointStore(store_dir, retained=retained, attempt=1)
    for _ in range(count):
        checkpoint_id = counter.get_and_increment()
        store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, checkpoint_id),
                                                discard=storage.discard)


class TestCounter:
    def test_the_counter_starts_at_one_and_survives_reopening(self, store_dir: str) -> None:
        counter = FileCheckpointIdCounter(store_dir, attempt=1)
        assert [counter.get_and_increment() for _ in range(3)] == [1, 2, 3]

        reopened = FileCheckpointIdCounter(store_dir, attempt=2)
        assert reopened.get() == 4
        assert reopened.get_and_increment() == 4

    def test_the_counter_never_goes_backwards(self, store_dir: str) -> None:
        counter = FileCheckpointIdCounter(store_dir, attempt=1)
        counter.set_count(100)
        counter.set_count(7)

        assert counter.get_and_increment() == 100

    def test_a_lost_counter_file_does_not_reuse_ids_of_retained_checkpoints(
        self, storage: CheckpointStorage, store_dir: str
    ) -> None:
        FileCheckpointStore(store_dir, retained=1, attempt=1).add_checkpoint_and_subsume_oldest(
            _checkpoint(storage, 41), discard=storage.discard)

        assert FileCheckpointIdCounter(store_dir, attempt=1).get_and_increment() == 42

    def test_a_corrupt_counter_is_reported_not_reset(self, store_dir: str) -> None:
        os.makedirs(store_dir)
        Path(store_dir, "counter").write_text("forty-two")

        with pytest.raises(CorruptStoreFileError) as caught:
            FileCheckpointIdCounter(store_dir, attempt=1).get_and_increment()
        assert "counter" in str(caught.value) and "forty-two" in str(caught.value)


class TestCorruptPointers:
    def test_a_corrupt_pointer_is_reported_with_its_id_and_file(
        self, storage: CheckpointStorage, store_dir: str
    ) -> None:
        store = FileCheckpointStore(store_dir, retained=3, attempt=1)
        for checkpoint_id in (1, 2):
            store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, checkpoint_id),
                                                    discard=storage.discard)
        Path(store_dir, "checkpointID-0000000000000000002").write_text('{"id": 2, "pa')

        with pytest.raises(CorruptPointerError) as caught:
            store.latest()

        assert caught.value.checkpoint_id == 2
        assert caught.value.path.endswith("checkpointID-0000000000000000002")
        assert "not a valid checkpoint pointer" in str(caught.value)
        latest = store.latest(skip_corrupt=True)
        assert latest is not None and latest.checkpoint_id == 1

    def test_a_pointer_naming_another_id_is_corrupt(
        self, storage: CheckpointStorage, store_dir: str
    ) -> None:
        os.makedirs(store_dir)
        Path(store_dir, "checkpointID-0000000000000000005").write_text(
            _checkpoint(storage, 6).to_json())

        with pytest.raises(CorruptPointerError, match="names checkpoint 6"):
            list_checkpoints(store_dir)

    def test_a_corrupt_pointer_ages_out_without_touching_data(
        self, storage: CheckpointStorage, store_dir: str
    ) -> None:
        store = FileCheckpointStore(store_dir, retained=1, attempt=1)
        store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 1), discard=storage.discard)
        Path(store_dir, "checkpointID-0000000000000000001").write_bytes(b"\xff\xfe")

        store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 2), discard=storage.discard)

        assert _ids(store.all()) == [2]
        assert storage.list_completed_ids() == [1, 2]


class TestShutdown:
    def test_a_finished_job_keeps_its_checkpoints_by_default(
        self, storage: CheckpointStorage, store_dir: str
    ) -> None:
        store = FileCheckpointStore(store_dir, retained=2, attempt=1)
        for checkpoint_id in (1, 2):
            store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, checkpoint_id),
                                                    discard=storage.discard)

        store.shutdown(JobOutcome.FINISHED, discard=storage.discard)

        assert _ids(list_checkpoints(store_dir)) == [1, 2]
        with pytest.raises(StoreClosedError):
            store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 3),
                                                    discard=storage.discard)

    def test_a_terminal_job_discards_everything_when_asked_but_keeps_the_counter(
        self, storage: CheckpointStorage, store_dir: str
    ) -> None:
        counter = FileCheckpointIdCounter(store_dir, attempt=1)
        store = FileCheckpointStore(store_dir, retained=2, attempt=1, discard_on_terminal=True)
        for _ in range(3):
            store.add_checkpoint_and_subsume_oldest(
                _checkpoint(storage, counter.get_and_increment()), discard=storage.discard)

        store.shutdown(JobOutcome.CANCELED, discard=storage.discard)

        assert list_checkpoints(store_dir) == []
        assert storage.list_completed_ids() == []
        assert counter.get() == 4

    def test_a_failed_or_suspended_job_always_keeps_its_checkpoints(
        self, storage: CheckpointStorage, store_dir: str
    ) -> None:
        for status in (JobOutcome.FAILED, JobOutcome.SUSPENDED):
            store = FileCheckpointStore(store_dir, retained=2, attempt=1,
                                        discard_on_terminal=True)
            store.add_checkpoint_and_subsume_oldest(_checkpoint(storage, 1),
                                                    discard=storage.discard)
            store.shutdown(status, discard=storage.discard)

            assert _ids(list_checkpoints(store_dir)) == [1]
