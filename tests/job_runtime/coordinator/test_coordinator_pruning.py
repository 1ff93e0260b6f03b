"""The coordinator when the store's pruning fails after the new pointer was committed.

The committed pointer names the new checkpoint's data: it is the job's newest
restorable checkpoint and its completion path must never delete it. Pruning
failures are counted in ``cjob_checkpoint_prune_failures_total``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.store.completed_store import CompletedCheckpoint, Discarder
from cjob_checkpoint.store.memory import InMemoryCheckpointIdCounter, InMemoryCheckpointStore
from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.coordinator.coordinator import CheckpointCoordinator
from job_runtime.coordinator.messages import (
    Abort,
    Ack,
    AckState,
    AckStats,
    ChannelAddress,
    Complete,
    Ready,
    Register,
    Registered,
)
from job_runtime.coordinator.rpc import SubtaskConnection, connect
from job_runtime.metrics import DriverMetrics

JOB = "job-uid1"
WAIT = 30.0
KEY = b"k" * 32


class ForbiddenPruneStore(InMemoryCheckpointStore):
    """Commits the pointer, then the pruning write is refused (like an apiserver's 403)."""

    def add_checkpoint_and_subsume_oldest(
        self, checkpoint: CompletedCheckpoint, *, discard: Discarder
    ) -> list[CompletedCheckpoint]:
        super().add_checkpoint_and_subsume_oldest(checkpoint, discard=lambda c: None)
        raise PermissionError("HTTP 403: not allowed to mark checkpoints for discard")


def failing_discard(checkpoint: CompletedCheckpoint) -> None:
    raise OSError(28, "No space left on device")


def run_one_checkpoint(storage: CheckpointStorage, store: InMemoryCheckpointStore, *,
                       on_complete: Callable[[CompletedCheckpoint, Any], None] | None = None,
                       ) -> tuple[CheckpointCoordinator, int, list[SubtaskConnection]]:
    coordinator = CheckpointCoordinator(
        job_id=JOB, attempt=1, parallelism=1, max_parallelism=128, stages=1, storage=storage,
        store=store, counter=InMemoryCheckpointIdCounter(),
        settings=CheckpointSettings(interval=0.0, tolerable_failures=5),
        initial_restore=None, initial_restore_pointer=None, on_complete=on_complete, key=KEY)
    conn = connect("127.0.0.1", coordinator.port, key=KEY)
    conn.sock.settimeout(WAIT)
    conn.send(Register(epoch=1, subtask=0, host="localhost", pid=0,
                       channel=ChannelAddress(host="127.0.0.1", port=1)))
    assert isinstance(conn.receive(), Registered)
    conn.send(Ready(epoch=1, subtask=0))
    deadline = time.monotonic() + WAIT
    checkpoint_id = None
    while checkpoint_id is None:
        assert time.monotonic() < deadline
        checkpoint_id = coordinator.trigger()
        time.sleep(0.01)
    storage.write_state(checkpoint_id, "reduce", 0, b"state")
    conn.send(Ack(epoch=1, subtask=0, checkpoint_id=checkpoint_id, stage=0,
                  state=AckState(sources={"0": 7}), stats=AckStats(bytes=5)))
    return coordinator, checkpoint_id, [conn]


def wait_for_message(conn: SubtaskConnection) -> Complete | Abort:
    """The outcome of the checkpoint: its completion or its abort."""
    while True:
        message = conn.receive()
        if isinstance(message, (Complete, Abort)):
            return message


@pytest.fixture
def storage(tmp_path: Path) -> CheckpointStorage:
    return CheckpointStorage((tmp_path / "ckpt").as_uri(), JOB)


class TestAPruningErrorEscapingTheStore:
    def test_the_committed_checkpoints_data_is_kept(self, storage: CheckpointStorage) -> None:
        store = ForbiddenPruneStore(retained=1)
        coordinator, checkpoint_id, conns = run_one_checkpoint(storage, store)
        try:
            wait_for_message(conns[0])
            with coordinator._lock:
                pass  # the message is sent while the coordinator still handles the ack
            latest = store.latest()
            assert latest is not None and latest.checkpoint_id == checkpoint_id
            metadata = json.loads(storage.read_metadata(latest.metadata_path))
            assert metadata["checkpointId"] == checkpoint_id
            assert checkpoint_id in storage.list_completed_ids()
        finally:
            coordinator.stop()


class TestAPruningFailureInsideTheStore:
    def test_the_checkpoint_completes_and_the_failure_is_counted(
            self, storage: CheckpointStorage) -> None:
        store = InMemoryCheckpointStore(retained=1)
        store.add_checkpoint_and_subsume_oldest(
            CompletedCheckpoint(checkpoint_id=0, metadata_path="file:///gone/chk-0/_metadata",
                                timestamp=0.0), discard=failing_discard)
        metrics = DriverMetrics(job="clicks")

        def on_complete(completed: CompletedCheckpoint, stats: Any) -> None:
            metrics.checkpoint_completed(checkpoint_id=completed.checkpoint_id,
                                         timestamp=completed.timestamp,
                                         size=completed.size_bytes, stats=stats)

        store_discard = storage.discard
        storage.discard = failing_discard  # type: ignore[method-assign]
        coordinator, checkpoint_id, conns = run_one_checkpoint(storage, store,
                                                               on_complete=on_complete)
        try:
            outcome = wait_for_message(conns[0])
            assert outcome == Complete(checkpoint_id=checkpoint_id, final=False)
            deadline = time.monotonic() + WAIT
            while metrics.registry.get_sample_value(
                    "cjob_checkpoint_prune_failures_total", {"cjob_job": "clicks"}) != 1.0:
                assert time.monotonic() < deadline, "the prune failure was never counted"
                time.sleep(0.01)
        finally:
            coordinator.stop()
            storage.discard = store_discard  # type: ignore[method-assign]
