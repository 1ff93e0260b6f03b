"""The checkpoint coordinator, driven over its real RPC endpoint by stand-in subtasks.

Each stand-in speaks the subtask side of the protocol (register, ready, ack,
decline) over a loopback socket, so the tests see what a subtask would see:
which checkpoint to restore, triggers, completions and aborts.
"""

from __future__ import annotations

import json
import select
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from coordinator_stand_in import KEY, WAIT, StandIn, wait_until

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata
from cjob_checkpoint.store.completed_store import CompletedCheckpoint
from cjob_checkpoint.store.memory import InMemoryCheckpointIdCounter, InMemoryCheckpointStore
from cjob_checkpoint.store.triggers import FileTriggerSource, request_checkpoint
from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.coordinator.coordinator import CheckpointCoordinator
from job_runtime.coordinator.messages import (
    Abort,
    AckState,
    ChannelAddress,
    Complete,
    Peers,
    Registered,
    Rejected,
    Trigger,
)
from job_runtime.errors import CheckpointFailureBudgetExceeded

JOB = "job-uid1"


def position(subtask: int, value: int) -> AckState:
    """An acknowledgement's state: the subtask's one source at ``value``."""
    return AckState(sources={str(subtask): value})


@pytest.fixture
def storage(tmp_path: Path) -> CheckpointStorage:
    return CheckpointStorage((tmp_path / "ckpt").as_uri(), JOB)


def make_coordinator(storage: CheckpointStorage, store: InMemoryCheckpointStore, *,
                     restore: CompletedCheckpoint | None = None, tolerable: int = 0,
                     interval: float = 0.0) -> CheckpointCoordinator:
    """``interval=0``: no periodic checkpoints, the tests trigger them."""
    metadata = (CheckpointMetadata.from_bytes(storage.read_metadata(restore.metadata_path))
                if restore else None)
    counter = InMemoryCheckpointIdCounter()
    if restore:
        counter.set_count(restore.checkpoint_id + 1)
    return CheckpointCoordinator(
        job_id=JOB, attempt=1, parallelism=2, max_parallelism=128, stages=1, storage=storage,
        store=store, counter=counter,
        settings=CheckpointSettings(interval=interval, tolerable_failures=tolerable),
        initial_restore=metadata, initial_restore_pointer=restore, key=KEY)


@pytest.fixture
def running(storage: CheckpointStorage) -> Iterator[tuple[CheckpointCoordinator,
                                                          InMemoryCheckpointStore,
                                                          list[StandIn]]]:
    store = InMemoryCheckpointStore(retained=3)
    coordinator = make_coordinator(storage, store, tolerable=1)
    subtasks = [StandIn(port=coordinator.port, subtask=i, epoch=1) for i in range(2)]
    for s in subtasks:
        assert s.register() == Registered(attempt=1, restore=None)
        s.ready()
    wait_until(lambda: coordinator.trigger() is not None, what="both subtasks are ready")
    try:
        yield coordinator, store, subtasks
    finally:
        coordinator.stop()




def write_checkpoint(storage: CheckpointStorage, checkpoint_id: int) -> CompletedCheckpoint:
    body = CheckpointMetadata(job=JOB, checkpoint_id=checkpoint_id, timestamp=time.time(),
                              final=False, attempt=1, parallelism=2, max_parallelism=128,
                              sources={0: checkpoint_id * 100})
    path = storage.write_metadata(checkpoint_id, body.to_bytes())
    return CompletedCheckpoint(checkpoint_id=checkpoint_id, metadata_path=path,
                               timestamp=time.time())


def test_a_checkpoint_completes_when_every_task_acknowledged(
        running: tuple[CheckpointCoordinator, InMemoryCheckpointStore, list[StandIn]],
        storage: CheckpointStorage) -> None:
    _, store, subtasks = running
    checkpoint_id = subtasks[0].expect(Trigger).checkpoint_id
    subtasks[1].expect(Trigger)
    subtasks[0].ack(checkpoint_id, state=position(0, 11))
    assert store.latest() is None, "completed before every task acknowledged"
    subtasks[1].ack(checkpoint_id, state=position(1, 22))

    for s in subtasks:
        assert s.expect(Complete).checkpoint_id == checkpoint_id
    latest = store.latest()
    assert latest is not None and latest.checkpoint_id == checkpoint_id
    metadata = json.loads(storage.read_metadata(latest.metadata_path))
    assert metadata["sources"] == {"0": 11, "1": 22}
    assert metadata["job"] == JOB and metadata["parallelism"] == 2


def test_declines_beyond_the_tolerable_failures_fail_the_job(
        running: tuple[CheckpointCoordinator, InMemoryCheckpointStore, list[StandIn]]) -> None:
    coordinator, store, subtasks = running
    first = subtasks[0].expect(Trigger).checkpoint_id
    subtasks[1].decline(first, reason="upload failed: disk full")
    for s in subtasks:
        assert s.expect(Abort).checkpoint_id == first
    assert coordinator.failure is None, "one failure is tolerable"

    second = coordinator.trigger()
    assert second is not None and second > first
    subtasks[0].decline(second, reason="upload failed: disk full")
    assert coordinator.failed_event.wait(WAIT)
    assert isinstance(coordinator.failure, CheckpointFailureBudgetExceeded)
    assert "disk full" in str(coordinator.failure)
    assert store.latest() is None


def test_a_checkpoint_subsumed_by_a_newer_barrier_is_no_failure(
        running: tuple[CheckpointCoordinator, InMemoryCheckpointStore, list[StandIn]]) -> None:
    coordinator, _, subtasks = running
    for _ in range(3):   # one failure is tolerable: three subsumed ones must not count
        checkpoint_id = coordinator.trigger()
        assert checkpoint_id is not None
        subtasks[0].decline(checkpoint_id, subsumed=True,
                            reason=f"subsumed by barrier {checkpoint_id + 1}")
        for s in subtasks:
            assert s.expect(Abort).checkpoint_id == checkpoint_id
    assert coordinator.failure is None


def test_a_zombie_of_an_older_epoch_is_ignored_and_refused(
        running: tuple[CheckpointCoordinator, InMemoryCheckpointStore, list[StandIn]]) -> None:
    coordinator, store, subtasks = running
    checkpoint_id = subtasks[0].expect(Trigger).checkpoint_id
    # Spark relaunched the stage: epoch 2 registers and aborts what was pending.
    fresh = [StandIn(port=coordinator.port, subtask=i, epoch=2) for i in range(2)]
    assert isinstance(fresh[0].register(), Registered)
    for s in subtasks:
        s.ack(checkpoint_id, state=position(s.subtask, 1))
    time.sleep(0.2)
    assert store.latest() is None, "acks of a dead epoch completed a checkpoint"
    late = StandIn(port=coordinator.port, subtask=1, epoch=1)
    assert isinstance(late.register(), Rejected)


class TestTheSubtasksMeetAtTheCoordinator:
    def test_every_subtask_learns_its_peers_once_the_last_one_registered(
            self, storage: CheckpointStorage) -> None:
        coordinator = make_coordinator(storage, InMemoryCheckpointStore(retained=3))
        try:
            first, second = (StandIn(port=coordinator.port, subtask=i, epoch=1)
                             for i in (1, 0))
            assert first.register() == Registered(attempt=1, restore=None)
            readable, _, _ = select.select([first.conn.sock], [], [], 0.3)
            assert readable == [], "peers were sent before every subtask registered"
            assert second.register() == Registered(attempt=1, restore=None)
            expected = Peers(channels=(ChannelAddress(host="127.0.0.1", port=40000),
                                       ChannelAddress(host="127.0.0.1", port=40001)))
            assert first.conn.receive() == expected
            assert second.conn.receive() == expected
        finally:
            coordinator.stop()

    def test_a_subtask_of_an_earlier_launch_still_waiting_for_its_peers_is_refused(
            self, storage: CheckpointStorage) -> None:
        coordinator = make_coordinator(storage, InMemoryCheckpointStore(retained=3))
        try:
            waiting = StandIn(port=coordinator.port, subtask=0, epoch=1)
            assert isinstance(waiting.register(), Registered)
            relaunched = [StandIn(port=coordinator.port, subtask=i, epoch=2) for i in range(2)]
            assert isinstance(relaunched[0].register(), Registered)
            assert waiting.conn.receive() == Rejected(reason="epoch 1 is over")
            assert isinstance(relaunched[1].register(), Registered)
            assert relaunched[0].expect(Peers) == relaunched[1].expect(Peers)
        finally:
            coordinator.stop()


def test_a_relaunch_after_a_fallback_restores_the_checkpoint_the_driver_started_from(
        storage: CheckpointStorage) -> None:
    store = InMemoryCheckpointStore(retained=3)
    for checkpoint_id in (1, 2, 3):
        store.add_checkpoint_and_subsume_oldest(write_checkpoint(storage, checkpoint_id),
                                                discard=storage.discard)
    damaged = Path(storage.metadata_uri(3).removeprefix("file://"))
    damaged.write_bytes(damaged.read_bytes()[:-3])
    fallback = store.all()[1]
    assert fallback.checkpoint_id == 2

    coordinator = make_coordinator(storage, store, restore=fallback)
    try:
        first = StandIn(port=coordinator.port, subtask=0, epoch=1)
        answer = first.register()
        assert isinstance(answer, Registered) and answer.restore is not None
        assert answer.restore.checkpoint_id == 2
        # A subtask dies before any new checkpoint: the relaunch must not pick
        # the store's newest (damaged) checkpoint, nor hang on it.
        relaunched = StandIn(port=coordinator.port, subtask=0, epoch=2)
        answer = relaunched.register()
        assert isinstance(answer, Registered) and answer.restore is not None, answer
        assert answer.restore.checkpoint_id == 2
        assert coordinator.failure is None
    finally:
        coordinator.stop()


def test_a_relaunch_that_cannot_read_its_checkpoint_fails_the_job_instead_of_hanging(
        storage: CheckpointStorage) -> None:
    store = InMemoryCheckpointStore(retained=3)
    checkpoint = write_checkpoint(storage, 1)
    store.add_checkpoint_and_subsume_oldest(checkpoint, discard=storage.discard)
    coordinator = make_coordinator(storage, store, restore=checkpoint)
    try:
        assert isinstance(StandIn(port=coordinator.port, subtask=0, epoch=1).register(), Registered)
        Path(checkpoint.metadata_path.removeprefix("file://")).unlink()
        answer = StandIn(port=coordinator.port, subtask=0, epoch=2).register()
        assert isinstance(answer, Rejected)
        assert "cannot load the checkpoint to restore" in answer.reason
        assert coordinator.failed_event.wait(WAIT)
    finally:
        coordinator.stop()


def test_a_manual_request_whose_checkpoint_aborted_is_served_by_the_next_one(
        storage: CheckpointStorage, tmp_path: Path) -> None:
    requests = tmp_path / "requests"
    requests.mkdir()
    coordinator = CheckpointCoordinator(
        job_id=JOB, attempt=1, parallelism=2, max_parallelism=128, stages=1, storage=storage,
        store=InMemoryCheckpointStore(retained=3), counter=InMemoryCheckpointIdCounter(),
        settings=CheckpointSettings(interval=0.0, tolerable_failures=5,
                                    trigger_poll_interval=0.05),
        initial_restore=None, initial_restore_pointer=None, key=KEY,
        triggers=FileTriggerSource(str(requests)))
    try:
        subtasks = [StandIn(port=coordinator.port, subtask=i, epoch=1) for i in range(2)]
        for s in subtasks:
            s.register()
            s.ready()
        request_checkpoint(str(requests), nonce="request-1")
        first = subtasks[0].expect(Trigger).checkpoint_id
        subtasks[1].decline(first, reason="upload failed")
        assert subtasks[0].expect(Abort).checkpoint_id == first

        second = subtasks[0].expect(Trigger).checkpoint_id
        assert second > first
        for s in subtasks:
            s.ack(second, state=position(s.subtask, 1))
        assert subtasks[0].expect(Complete).checkpoint_id == second
        wait_until(lambda: (requests / "trigger.ack").exists(), what="the request is answered")
        assert (requests / "trigger.ack").read_text() == f"request-1:{second}"
    finally:
        coordinator.stop()
