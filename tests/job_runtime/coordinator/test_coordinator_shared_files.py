"""The coordinator deletes shared files nothing retained uses, and never completes a
checkpoint that references one it deleted.

Driven over the coordinator's real RPC endpoint by one stand-in subtask whose
acknowledgements carry incremental state handles, as the ``rocksdb`` backend's do.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from coordinator_stand_in import KEY, StandIn, wait_until

from cjob_checkpoint.checkpoint_storage import CheckpointStorage, StateHandle
from cjob_checkpoint.metadata import SharedStateFile
from cjob_checkpoint.storage.local import local_path
from cjob_checkpoint.store.memory import InMemoryCheckpointIdCounter, InMemoryCheckpointStore
from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.coordinator.coordinator import CheckpointCoordinator
from job_runtime.coordinator.messages import (
    Abort,
    AckState,
    Complete,
    OperatorState,
    Registered,
    Trigger,
)

JOB = "job-uid1"


class Subtask:
    """The stand-in subtask, acknowledging with incremental state handles."""

    def __init__(self, coordinator: CheckpointCoordinator, storage: CheckpointStorage) -> None:
        self.stand_in = StandIn(port=coordinator.port)
        self.storage = storage
        assert self.stand_in.register() == Registered(attempt=1, restore=None)
        self.stand_in.ready()

    def shared(self, name: str) -> SharedStateFile:
        """A shared file as an upload leaves it (written once, then only referenced)."""
        uri = self.storage.shared_uri(name)
        if not self.storage.fs.exists(uri):
            self.storage.fs.write_bytes(uri, b"table " + name.encode())
        return SharedStateFile(name="000001.sst", handle=StateHandle(uri=uri, size_bytes=6,
                                                                      crc32=0))

    def ack(self, checkpoint_id: int, *shared: SharedStateFile) -> None:
        handle = self.storage.write_state(checkpoint_id, "count-1", 0, b"private")
        self.stand_in.ack(checkpoint_id, state=AckState(sources={"0": checkpoint_id}, operators={
            "count-1": OperatorState(handle=handle, key_groups=(0, 128), shared=shared)}))


@pytest.fixture
def job(tmp_path: Path) -> Iterator[tuple[CheckpointCoordinator, InMemoryCheckpointStore,
                                          Subtask]]:
    storage = CheckpointStorage((tmp_path / "ckpt").as_uri(), JOB)
    store = InMemoryCheckpointStore(retained=1)
    coordinator = CheckpointCoordinator(
        job_id=JOB, attempt=1, parallelism=1, max_parallelism=128, stages=1, storage=storage,
        store=store, counter=InMemoryCheckpointIdCounter(),
        settings=CheckpointSettings(interval=0.0, tolerable_failures=5),
        initial_restore=None, initial_restore_pointer=None, key=KEY)
    subtask = Subtask(coordinator, storage)
    wait_until(lambda: coordinator.trigger() is not None, what="the subtask is ready")
    try:
        yield coordinator, store, subtask
    finally:
        coordinator.stop()




def exists(shared: SharedStateFile) -> bool:
    return Path(local_path(shared.handle.uri)).exists()


def test_a_pruned_checkpoints_shared_file_goes_only_once_no_retained_one_uses_it(
        job: tuple[CheckpointCoordinator, InMemoryCheckpointStore, Subtask]) -> None:
    coordinator, store, subtask = job
    first = subtask.stand_in.expect(Trigger).checkpoint_id
    a, b = subtask.shared("a"), subtask.shared("b")
    subtask.ack(first, a, b)
    subtask.stand_in.expect(Complete)

    second = coordinator.trigger()
    assert second is not None
    subtask.stand_in.expect(Trigger)
    subtask.ack(second, b)                       # a was compacted away, b is reused
    assert subtask.stand_in.expect(Complete).checkpoint_id == second
    assert [c.checkpoint_id for c in store.all()] == [second]
    assert not exists(a) and exists(b)


def test_a_checkpoint_referencing_a_deleted_shared_file_fails_instead_of_completing(
        job: tuple[CheckpointCoordinator, InMemoryCheckpointStore, Subtask]) -> None:
    coordinator, store, subtask = job
    first = subtask.stand_in.expect(Trigger).checkpoint_id
    a = subtask.shared("a")
    subtask.ack(first, a)
    subtask.stand_in.expect(Complete)
    second = coordinator.trigger()
    assert second is not None
    subtask.stand_in.expect(Trigger)
    subtask.ack(second, subtask.shared("c"))
    subtask.stand_in.expect(Complete)
    assert not exists(a)

    late = coordinator.trigger()                 # a snapshot that still reused ``a``
    assert late is not None
    subtask.stand_in.expect(Trigger)
    subtask.ack(late, a)
    aborted = subtask.stand_in.expect(Abort)
    assert aborted.checkpoint_id == late
    assert "shared file" in aborted.reason
    assert [c.checkpoint_id for c in store.all()] == [second]
