"""The contract every completed-checkpoint store keeps, run against all three backends.

The rules live once (``cjob_checkpoint.store.backed``); these tests hold each backend to
them: in memory, as files, and as a ConfigMap on a real kube-apiserver. Each test gets
a fresh store whose fence was advanced to attempt 1, and a real ``file://`` checkpoint
storage, so discarding really deletes checkpoint directories.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.store.backed import (
    BackedCheckpointIdCounter,
    BackedCheckpointStore,
    advance_fence,
    hold_checkpoint,
    release_checkpoint,
)
from cjob_checkpoint.store.backend import StoreBackend, update_state
from cjob_checkpoint.store.completed_store import (
    CompletedCheckpoint,
    CorruptPointerError,
    FencedError,
    NoRestorableCheckpointError,
    UnreadableCheckpointError,
)
from cjob_checkpoint.store.configmap import (
    ConfigMapBackend,
    ConfigMapCheckpointIdCounter,
    ConfigMapCheckpointStore,
    ensure_configmap,
)
from cjob_checkpoint.store.configmap_client import ConfigMapAccess
from cjob_checkpoint.store.file import FileBackend, FileCheckpointIdCounter, FileCheckpointStore
from cjob_checkpoint.store.holds import UnreadableHoldsError
from cjob_checkpoint.store.memory import (
    InMemoryCheckpointIdCounter,
    InMemoryCheckpointStore,
    MemoryBackend,
)
from cjob_checkpoint.store.restore_report import RestoredCheckpoint, RestoreReport
from cjob_checkpoint.store.staged_inputs import (
    StagedInput,
    StagedInputFencedError,
    UnreadableStagedInputsError,
)
from cjob_checkpoint.store.state import StoreDraft


class Harness:
    """One store location and the checkpoint data its pointers name."""

    def __init__(self, *, backend: Callable[[], StoreBackend],
                 store: Callable[[int, int], BackedCheckpointStore],
                 counter: Callable[[int], BackedCheckpointIdCounter],
                 storage: CheckpointStorage) -> None:
        self.backend = backend
        self._store = store
        self._counter = counter
        self.storage = storage
        self.discarded: list[int] = []
        self.advance(1)

    def store(self, *, attempt: int = 1, retained: int = 3) -> BackedCheckpointStore:
        return self._store(attempt, retained)

    def counter(self, *, attempt: int = 1) -> BackedCheckpointIdCounter:
        return self._counter(attempt)

    def advance(self, attempt: int) -> None:
        advance_fence(self.backend(), attempt, where="test")

    def checkpoint(self, checkpoint_id: int) -> CompletedCheckpoint:
        """Write a checkpoint's data, ``_metadata`` last, and return its pointer."""
        self.storage.write_state(checkpoint_id, "reduce", 0, b"state-%d" % checkpoint_id)
        path = self.storage.write_metadata(checkpoint_id, b'{"job": "x"}')
        return CompletedCheckpoint(checkpoint_id=checkpoint_id, metadata_path=path,
                                   timestamp=float(checkpoint_id), size_bytes=12, attempt=1)

    def discard(self, checkpoint: CompletedCheckpoint) -> None:
        self.discarded.append(checkpoint.checkpoint_id)
        self.storage.discard(checkpoint)

    def damage_pointer(self, checkpoint_id: int) -> None:
        """Overwrite a pointer with text that is no pointer, through the backend itself."""
        def change(draft: StoreDraft) -> bool:
            draft.pointers[checkpoint_id] = '{"id": ' + str(checkpoint_id) + ', "pa'
            return True

        update_state(self.backend(), change, operation="damage a pointer", where="test")


def memory_harness(tmp_path: Path, request: pytest.FixtureRequest) -> Harness:
    backend = MemoryBackend()
    return Harness(
        backend=lambda: backend,
        store=lambda attempt, retained: InMemoryCheckpointStore(
            retained=retained, attempt=attempt, backend=backend),
        counter=lambda attempt: InMemoryCheckpointIdCounter(attempt=attempt, backend=backend),
        storage=CheckpointStorage(f"file://{tmp_path}/ckpt", "job-uid1"))


def file_harness(tmp_path: Path, request: pytest.FixtureRequest) -> Harness:
    directory = str(tmp_path / "store")
    return Harness(
        backend=lambda: FileBackend(directory),
        store=lambda attempt, retained: FileCheckpointStore(
            directory, retained=retained, attempt=attempt),
        counter=lambda attempt: FileCheckpointIdCounter(directory, attempt=attempt),
        storage=CheckpointStorage(f"file://{tmp_path}/ckpt", "job-uid1"))


def configmap_harness(tmp_path: Path, request: pytest.FixtureRequest) -> Harness:
    api: Any = request.getfixturevalue("core_api")
    namespace: str = request.getfixturevalue("store_namespace")
    job = f"job-{secrets.token_hex(4)}"
    name = f"{job}-checkpoints"
    assert ensure_configmap(api=api, namespace=namespace, name=name, job_name=job,
                            owner_reference=None)
    return Harness(
        backend=lambda: ConfigMapBackend(
            access=ConfigMapAccess(api=api, namespace=namespace, name=name)),
        store=lambda attempt, retained: ConfigMapCheckpointStore(
            api=api, namespace=namespace, name=name, retained=retained, attempt=attempt),
        counter=lambda attempt: ConfigMapCheckpointIdCounter(
            api=api, namespace=namespace, name=name, attempt=attempt),
        storage=CheckpointStorage(f"file://{tmp_path}/ckpt", f"{job}-uid1"))


@pytest.fixture(params=[
    pytest.param(memory_harness, id="memory"),
    pytest.param(file_harness, id="file"),
    pytest.param(configmap_harness, id="configmap", marks=pytest.mark.cluster),
])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    make: Callable[[Path, pytest.FixtureRequest], Harness] = request.param
    return make(tmp_path, request)


def ids(checkpoints: list[CompletedCheckpoint]) -> list[int]:
    return [c.checkpoint_id for c in checkpoints]


def together(*work: Callable[[], None]) -> None:
    """Run each piece of work in its own thread, all at once, and wait for all."""
    threads = [threading.Thread(target=piece) for piece in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def refuse(_: CompletedCheckpoint) -> None:
    raise OSError(28, "No space left on device")


class TestAddingAndRetaining:
    def test_only_the_retained_newest_stay_and_the_older_data_is_deleted_oldest_first(
            self, harness: Harness) -> None:
        store = harness.store(retained=2)
        for checkpoint_id in range(1, 6):
            store.add_checkpoint_and_subsume_oldest(harness.checkpoint(checkpoint_id),
                                                    discard=harness.discard)

        assert ids(store.all()) == [4, 5]
        latest = store.latest()
        assert latest is not None and latest.checkpoint_id == 5
        assert harness.discarded == [1, 2, 3]
        assert harness.storage.list_completed_ids() == [4, 5]

    def test_a_second_store_object_sees_what_the_first_committed(self, harness: Harness) -> None:
        harness.store().add_checkpoint_and_subsume_oldest(harness.checkpoint(1),
                                                          discard=harness.discard)

        assert ids(harness.store().all()) == [1]

    def test_an_older_checkpoint_added_late_never_displaces_the_newest(
            self, harness: Harness) -> None:
        store = harness.store(retained=1)
        store.add_checkpoint_and_subsume_oldest(harness.checkpoint(9), discard=harness.discard)

        gone = store.add_checkpoint_and_subsume_oldest(harness.checkpoint(8),
                                                       discard=harness.discard)

        assert ids(gone) == [8]
        assert ids(store.all()) == [9]


class TestTwoPhasePruning:
    def test_a_failed_discard_keeps_the_checkpoint_marked_and_the_next_add_retries_it(
            self, harness: Harness) -> None:
        store = harness.store(retained=1)
        store.add_checkpoint_and_subsume_oldest(harness.checkpoint(1), discard=harness.discard)

        assert store.add_checkpoint_and_subsume_oldest(harness.checkpoint(2),
                                                       discard=refuse) == []
        assert ids(store.all()) == [2]
        assert store.marked_ids() == [1]
        assert store.prune_failures == 1
        assert harness.storage.list_completed_ids() == [1, 2]

        gone = store.add_checkpoint_and_subsume_oldest(harness.checkpoint(3),
                                                       discard=harness.discard)

        assert ids(gone) == [1, 2]
        assert store.marked_ids() == []
        assert harness.storage.list_completed_ids() == [3]


class TestHolds:
    def hold(self, harness: Harness, checkpoint_id: int, holder: str = "snap-uid") -> bool:
        return hold_checkpoint(harness.backend(), where="test", checkpoint_id=checkpoint_id,
                               holder=holder, by=f"snapshot {holder}")

    def test_a_held_checkpoint_outlives_retention_until_its_holder_lets_go(
            self, harness: Harness) -> None:
        store = harness.store(retained=1)
        store.add_checkpoint_and_subsume_oldest(harness.checkpoint(1), discard=harness.discard)
        assert self.hold(harness, 1)

        for checkpoint_id in (2, 3):
            store.add_checkpoint_and_subsume_oldest(harness.checkpoint(checkpoint_id),
                                                    discard=harness.discard)

        assert ids(store.all()) == [1, 3]
        assert harness.discarded == [2]
        assert harness.storage.list_completed_ids() == [1, 3]

        assert release_checkpoint(harness.backend(), where="test", holder="snap-uid")
        store.add_checkpoint_and_subsume_oldest(harness.checkpoint(4), discard=harness.discard)

        assert ids(store.all()) == [4]
        assert harness.storage.list_completed_ids() == [4]

    def test_a_checkpoint_already_marked_or_gone_cannot_be_held(
            self, harness: Harness) -> None:
        store = harness.store(retained=1)
        store.add_checkpoint_and_subsume_oldest(harness.checkpoint(1), discard=harness.discard)
        store.add_checkpoint_and_subsume_oldest(harness.checkpoint(2), discard=refuse)
        assert store.marked_ids() == [1]

        assert not self.hold(harness, 1)  # marked: its data may already be half deleted
        assert not self.hold(harness, 7)  # never there
        assert self.hold(harness, 2)
        assert harness.backend().read().holds is not None

    def test_holds_survive_a_new_attempt_and_each_holder_keeps_its_own(
            self, harness: Harness) -> None:
        store = harness.store(retained=1)
        for checkpoint_id in (1, 2):
            store.add_checkpoint_and_subsume_oldest(harness.checkpoint(checkpoint_id),
                                                    discard=harness.discard)
            assert self.hold(harness, checkpoint_id, holder=f"snap-{checkpoint_id}")
        harness.advance(2)
        newer = harness.store(attempt=2, retained=1)

        newer.add_checkpoint_and_subsume_oldest(harness.checkpoint(3), discard=harness.discard)
        assert ids(newer.all()) == [1, 2, 3]
        release_checkpoint(harness.backend(), where="test", holder="snap-1")
        newer.add_checkpoint_and_subsume_oldest(harness.checkpoint(4), discard=harness.discard)

        assert ids(newer.all()) == [2, 4]
        assert not release_checkpoint(harness.backend(), where="test", holder="snap-1")

    def test_unreadable_holds_prune_nothing_and_are_never_overwritten(
            self, harness: Harness) -> None:
        store = harness.store(retained=1)
        store.add_checkpoint_and_subsume_oldest(harness.checkpoint(1), discard=harness.discard)

        def damage(draft: StoreDraft) -> bool:
            draft.holds = '{"version": 99, "holds": {}}'
            return True

        update_state(harness.backend(), damage, operation="damage the holds", where="test")
        store.add_checkpoint_and_subsume_oldest(harness.checkpoint(2), discard=harness.discard)

        assert ids(store.all()) == [1, 2]
        assert harness.discarded == []
        with pytest.raises(UnreadableHoldsError, match="version 99"):
            self.hold(harness, 2)
        assert harness.backend().read().holds == '{"version": 99, "holds": {}}'


class TestFencing:
    def test_an_older_attempt_can_neither_add_prune_nor_take_an_id(
            self, harness: Harness) -> None:
        zombie = harness.store(attempt=1, retained=1)
        zombie.add_checkpoint_and_subsume_oldest(harness.checkpoint(1), discard=harness.discard)
        harness.advance(2)

        with pytest.raises(FencedError) as caught:
            zombie.add_checkpoint_and_subsume_oldest(harness.checkpoint(2),
                                                     discard=harness.discard)
        with pytest.raises(FencedError):
            zombie.prune(discard=harness.discard)
        with pytest.raises(FencedError):
            harness.counter(attempt=1).get_and_increment()

        assert (caught.value.attempt, caught.value.current_attempt) == (1, 2)
        assert ids(harness.store(attempt=2).all()) == [1]
        assert harness.storage.list_completed_ids() == [1, 2]

    def test_a_newer_attempt_takes_the_fence_over_and_it_never_moves_back(
            self, harness: Harness) -> None:
        harness.store(attempt=4).add_checkpoint_and_subsume_oldest(
            harness.checkpoint(1), discard=harness.discard)

        with pytest.raises(FencedError):
            harness.advance(3)
        with pytest.raises(FencedError):
            harness.store(attempt=3).add_checkpoint_and_subsume_oldest(
                harness.checkpoint(2), discard=harness.discard)

    def test_an_attempt_learns_it_was_fenced_without_writing(
            self, harness: Harness) -> None:
        zombie = harness.store(attempt=1)
        zombie.check_fence()  # the current attempt: no error, nothing written
        harness.advance(2)

        with pytest.raises(FencedError) as caught:
            zombie.check_fence()

        assert (caught.value.attempt, caught.value.current_attempt) == (1, 2)
        harness.store(attempt=2).check_fence()
        assert harness.store(attempt=2).all() == []

    def test_an_older_attempt_cannot_overwrite_the_restore_report(
            self, harness: Harness) -> None:
        harness.advance(2)
        report = RestoreReport(attempt=2, checkpoint=RestoredCheckpoint(id=1, path="p1"),
                               fallback_from=RestoredCheckpoint(id=2, path="p2"))
        assert harness.store(attempt=2).record_restore(report)

        with pytest.raises(FencedError):
            harness.store(attempt=1).record_restore(
                RestoreReport(attempt=1, checkpoint=None))

        assert harness.store(attempt=2).restore_report() == report


def staged(uri: str, *, attempt: int = 1, name: str = "numbers") -> StagedInput:
    return StagedInput(name=name, uri=uri, attempt=attempt)


class TestPublishingStagedInputs:
    def test_the_first_publication_of_a_name_wins_for_good(self, harness: Harness) -> None:
        harness.advance(2)
        first = harness.store(attempt=2).publish_staged_input(staged("s/a", attempt=2))

        later = harness.store(attempt=3).publish_staged_input(staged("s/b", attempt=3))

        assert later == first == staged("s/a", attempt=2)
        assert harness.store(attempt=3).staged_input("numbers") == first

    def test_an_older_attempt_cannot_publish_even_a_name_still_free(
            self, harness: Harness) -> None:
        harness.advance(2)

        with pytest.raises(StagedInputFencedError) as caught:
            harness.store(attempt=1).publish_staged_input(staged("s/old"))

        assert (caught.value.attempt, caught.value.current_attempt) == (1, 2)
        assert caught.value.name == "numbers"
        assert harness.store(attempt=2).staged_input("numbers") is None

    def test_publications_of_other_names_and_checkpoints_keep_each_other(
            self, harness: Harness) -> None:
        store = harness.store()
        store.publish_staged_input(staged("s/a"))
        store.add_checkpoint_and_subsume_oldest(harness.checkpoint(1), discard=harness.discard)
        store.publish_staged_input(staged("s/c", name="clicks"))

        assert store.staged_input("numbers") == staged("s/a")
        assert store.staged_input("clicks") == staged("s/c", name="clicks")
        assert ids(store.all()) == [1]

    def test_two_drivers_publishing_at_once_agree_on_one_winner(self, harness: Harness) -> None:
        winners: list[StagedInput] = []

        def publish(uri: str) -> None:
            winners.append(harness.store().publish_staged_input(staged(uri)))

        together(lambda: publish("s/one"), lambda: publish("s/two"))

        assert len(winners) == 2 and winners[0] == winners[1]
        assert harness.store().staged_input("numbers") == winners[0]

    def test_a_record_of_another_version_is_refused_and_never_overwritten(
            self, harness: Harness) -> None:
        def damage(draft: StoreDraft) -> bool:
            draft.staged_inputs = '{"version": 99, "inputs": {}}'
            return True

        update_state(harness.backend(), damage, operation="damage the record", where="test")

        with pytest.raises(UnreadableStagedInputsError, match="version 99"):
            harness.store().publish_staged_input(staged("s/a"))
        with pytest.raises(UnreadableStagedInputsError):
            harness.store().staged_input("numbers")
        assert harness.backend().read().staged_inputs == '{"version": 99, "inputs": {}}'


class TestCounter:
    def test_ids_only_go_up_and_stay_above_every_pointer(self, harness: Harness) -> None:
        counter = harness.counter()
        assert [counter.get_and_increment() for _ in range(3)] == [1, 2, 3]
        counter.set_count(2)
        assert counter.get_and_increment() == 4

        harness.store().add_checkpoint_and_subsume_oldest(harness.checkpoint(41),
                                                          discard=harness.discard)

        assert harness.counter(attempt=2).get() == 42


class TestDamagedPointers:
    def test_a_damaged_pointer_raises_unless_skipped(self, harness: Harness) -> None:
        store = harness.store()
        for checkpoint_id in (1, 2):
            store.add_checkpoint_and_subsume_oldest(harness.checkpoint(checkpoint_id),
                                                    discard=harness.discard)
        harness.damage_pointer(2)

        with pytest.raises(CorruptPointerError) as caught:
            store.latest()

        assert caught.value.checkpoint_id == 2
        assert "not a valid checkpoint pointer" in str(caught.value)
        assert ids(store.all(skip_corrupt=True)) == [1]

    def test_a_damaged_pointer_ages_out_without_touching_data(self, harness: Harness) -> None:
        store = harness.store(retained=1)
        store.add_checkpoint_and_subsume_oldest(harness.checkpoint(1), discard=harness.discard)
        harness.damage_pointer(1)

        store.add_checkpoint_and_subsume_oldest(harness.checkpoint(2), discard=harness.discard)

        assert ids(store.all()) == [2]
        assert harness.discarded == []
        assert harness.storage.list_completed_ids() == [1, 2]


class TestLatestRestorable:
    def test_the_newest_readable_checkpoint_is_chosen_only_with_fallback(
            self, harness: Harness) -> None:
        store = harness.store()
        for checkpoint_id in (1, 2, 3):
            store.add_checkpoint_and_subsume_oldest(harness.checkpoint(checkpoint_id),
                                                    discard=harness.discard)
        harness.damage_pointer(3)
        harness.storage.discard(store.all(skip_corrupt=True)[-1])

        with pytest.raises(UnreadableCheckpointError):
            store.latest_restorable(storage_reader=harness.storage.read_metadata,
                                    fallback=False)
        chosen, notes = store.latest_restorable(storage_reader=harness.storage.read_metadata,
                                                fallback=True)

        assert chosen is not None and chosen.checkpoint_id == 1
        assert [note.split(" is ")[0] for note in notes] == ["checkpoint 3", "checkpoint 2"]

    def test_nothing_readable_is_a_clear_error_and_an_empty_store_restores_nothing(
            self, harness: Harness) -> None:
        store = harness.store()
        assert store.latest_restorable(storage_reader=harness.storage.read_metadata,
                                       fallback=True) == (None, [])
        store.add_checkpoint_and_subsume_oldest(harness.checkpoint(1), discard=harness.discard)
        harness.storage.discard(store.all()[0])

        with pytest.raises(NoRestorableCheckpointError, match="no older retained checkpoint"):
            store.latest_restorable(storage_reader=harness.storage.read_metadata,
                                    fallback=True)


class TestConcurrentWriters:
    def test_two_store_objects_adding_at_once_lose_no_pointer_and_keep_the_newest(
            self, harness: Harness) -> None:
        failures: list[BaseException] = []

        def add(ids_to_add: range, retained: int) -> None:
            store = harness.store(retained=retained)
            try:
                for checkpoint_id in ids_to_add:
                    store.add_checkpoint_and_subsume_oldest(harness.checkpoint(checkpoint_id),
                                                            discard=harness.storage.discard)
            except BaseException as exc:
                failures.append(exc)

        together(lambda: add(range(1, 41, 2), 100), lambda: add(range(2, 41, 2), 100))

        assert failures == []
        assert ids(harness.store().all()) == list(range(1, 41))

        together(lambda: add(range(41, 61, 2), 3), lambda: add(range(42, 61, 2), 3))

        assert failures == []
        assert ids(harness.store().all()) == [58, 59, 60]
        assert harness.storage.list_completed_ids() == [58, 59, 60]

    def test_two_counters_never_hand_out_an_id_twice(self, harness: Harness) -> None:
        taken: list[int] = []
        lock = threading.Lock()

        def take() -> None:
            counter = harness.counter()
            for _ in range(15):
                value = counter.get_and_increment()
                with lock:
                    taken.append(value)

        together(take, take)

        assert sorted(taken) == list(range(1, 31))
