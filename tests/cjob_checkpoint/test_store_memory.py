"""The in-memory store and counter follow the same rules as the durable ones."""

from __future__ import annotations

import pickle
import threading

import pytest

from cjob_checkpoint.store.completed_store import (
    CompletedCheckpoint,
    FencedError,
    JobOutcome,
    UnreadableCheckpointError,
)
from cjob_checkpoint.store.memory import InMemoryCheckpointIdCounter, InMemoryCheckpointStore
from cjob_checkpoint.store.retention import InvalidRetentionError


def _checkpoint(checkpoint_id: int) -> CompletedCheckpoint:
    return CompletedCheckpoint(checkpoint_id=checkpoint_id,
                               metadata_path=f"/ckpt/job-1/chk-{checkpoint_id}/_metadata",
                               timestamp=float(checkpoint_id))


class Recorder:
    def __init__(self) -> None:
        self.discarded: list[int] = []

    def __call__(self, checkpoint: CompletedCheckpoint) -> None:
        self.discarded.append(checkpoint.checkpoint_id)


class TestRetention:
    @pytest.mark.parametrize("retained", [1, 10])
    def test_only_the_newest_retained_checkpoints_remain(self, retained: int) -> None:
        store = InMemoryCheckpointStore(retained=retained)
        discard = Recorder()
        for checkpoint_id in range(1, 21):
            store.add_checkpoint_and_subsume_oldest(_checkpoint(checkpoint_id), discard=discard)

        assert [c.checkpoint_id for c in store.all()] == list(range(21 - retained, 21))
        assert discard.discarded == list(range(1, 21 - retained))
        latest = store.latest()
        assert latest is not None and latest.checkpoint_id == 20

    def test_a_late_older_checkpoint_never_displaces_the_newest(self) -> None:
        store = InMemoryCheckpointStore(retained=1)
        store.add_checkpoint_and_subsume_oldest(_checkpoint(9), discard=Recorder())

        gone = store.add_checkpoint_and_subsume_oldest(_checkpoint(8), discard=Recorder())

        assert [c.checkpoint_id for c in gone] == [8]
        assert [c.checkpoint_id for c in store.all()] == [9]

    def test_a_failing_discard_is_retried_on_the_next_add(self) -> None:
        store = InMemoryCheckpointStore(retained=1)
        store.add_checkpoint_and_subsume_oldest(_checkpoint(1), discard=Recorder())

        def broken(_: CompletedCheckpoint) -> None:
            raise OSError("disk unavailable")

        assert store.add_checkpoint_and_subsume_oldest(_checkpoint(2), discard=broken) == []
        assert [c.checkpoint_id for c in store.marked_for_discard()] == [1]
        assert [c.checkpoint_id for c in store.all()] == [2]

        discard = Recorder()
        store.add_checkpoint_and_subsume_oldest(_checkpoint(3), discard=discard)
        assert discard.discarded == [1, 2]

    def test_retention_below_one_is_refused(self) -> None:
        with pytest.raises(InvalidRetentionError):
            InMemoryCheckpointStore(retained=0)

    def test_shutdown_keeps_checkpoints_unless_asked_for_a_terminal_job(self) -> None:
        keep = InMemoryCheckpointStore(retained=2)
        drop = InMemoryCheckpointStore(retained=2, discard_on_terminal=True)
        for store in (keep, drop):
            store.add_checkpoint_and_subsume_oldest(_checkpoint(1), discard=Recorder())

        discard = Recorder()
        keep.shutdown(JobOutcome.FINISHED, discard=discard)
        drop.shutdown(JobOutcome.SUSPENDED, discard=discard)
        assert discard.discarded == []
        drop.shutdown(JobOutcome.FINISHED, discard=discard)

        assert discard.discarded == [1]
        assert len(keep.all()) == 1 and drop.all() == []


class TestCounter:
    def test_ids_are_unique_across_threads(self) -> None:
        counter = InMemoryCheckpointIdCounter()
        seen: list[int] = []
        lock = threading.Lock()

        def take() -> None:
            for _ in range(200):
                value = counter.get_and_increment()
                with lock:
                    seen.append(value)

        threads = [threading.Thread(target=take) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert sorted(seen) == list(range(1, 801))
        assert counter.get() == 801

    def test_set_count_only_moves_forward(self) -> None:
        counter = InMemoryCheckpointIdCounter()
        counter.set_count(50)
        counter.set_count(3)

        assert counter.get_and_increment() == 50


class TestErrors:
    def test_store_errors_survive_pickling_with_their_fields(self) -> None:
        fenced = pickle.loads(pickle.dumps(FencedError(attempt=1, current_attempt=2)))
        unreadable = pickle.loads(pickle.dumps(
            UnreadableCheckpointError(checkpoint_id=4, path="s3://b/x", cause="gone")))

        assert (fenced.attempt, fenced.current_attempt) == (1, 2)
        assert (unreadable.checkpoint_id, unreadable.path, unreadable.cause) == (
            4, "s3://b/x", "gone")
