"""A standby's coordinator endpoint: subtasks register before there is a coordinator.

The stand-ins speak the subtask side of the real, authenticated RPC. Until a
coordinator attaches they get no answer; once one does, each gets the attempt and
the checkpoint that coordinator restores, as if it had been there all along.
"""

from __future__ import annotations

import select
from collections.abc import Iterator
from pathlib import Path

import pytest
from coordinator_stand_in import KEY, StandIn, wait_until

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata
from cjob_checkpoint.store.memory import InMemoryCheckpointIdCounter, InMemoryCheckpointStore
from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.coordinator.coordinator import CheckpointCoordinator
from job_runtime.coordinator.endpoint import CoordinatorEndpoint
from job_runtime.coordinator.messages import Ready, Registered, Rejected

JOB = "job-uid1"


@pytest.fixture
def endpoint() -> Iterator[CoordinatorEndpoint]:
    endpoint = CoordinatorEndpoint(host="127.0.0.1", key=KEY)
    try:
        yield endpoint
    finally:
        endpoint.stop()


def coordinator_on(endpoint: CoordinatorEndpoint, tmp_path: Path, *, attempt: int,
                   restore: CheckpointMetadata | None = None) -> CheckpointCoordinator:
    return CheckpointCoordinator(
        job_id=JOB, attempt=attempt, parallelism=2, max_parallelism=128, stages=1,
        storage=CheckpointStorage((tmp_path / "ckpt").as_uri(), JOB),
        store=InMemoryCheckpointStore(retained=3), counter=InMemoryCheckpointIdCounter(),
        settings=CheckpointSettings(interval=0.0), initial_restore=restore,
        initial_restore_pointer=None, key=KEY, endpoint=endpoint)


def no_answer_yet(stand_in: StandIn) -> bool:
    """Nothing to read on the connection for a moment (the stand-in stays usable)."""
    ready, _, _ = select.select([stand_in.conn.sock], [], [], 0.3)
    return not ready


def parked_stand_ins(endpoint: CoordinatorEndpoint, *, epoch: int) -> list[StandIn]:
    """Two subtasks of stage attempt ``epoch``, registered and parked at ``endpoint``."""
    subtasks = [StandIn(port=endpoint.port, subtask=i, epoch=epoch) for i in range(2)]
    for s in subtasks:
        s.send_registration()
    assert endpoint.wait_parked(2, timeout=30)
    return subtasks


class TestParkedRegistrations:
    def test_a_registration_before_any_coordinator_gets_no_answer_and_is_counted(
            self, endpoint: CoordinatorEndpoint) -> None:
        subtasks = parked_stand_ins(endpoint, epoch=5)
        assert endpoint.parked() == 2
        assert all(no_answer_yet(s) for s in subtasks)

    def test_the_attached_coordinator_answers_with_its_attempt_and_restore_point(
            self, endpoint: CoordinatorEndpoint, tmp_path: Path) -> None:
        subtasks = parked_stand_ins(endpoint, epoch=5)
        restore = CheckpointMetadata(job=JOB, checkpoint_id=7, timestamp=1.0, final=False,
                                     attempt=2, parallelism=2, max_parallelism=128)
        coordinator = coordinator_on(endpoint, tmp_path, attempt=3, restore=restore)
        try:
            for s in subtasks:
                assert s.conn.receive() == Registered(attempt=3, restore=restore)
                s.ready()
            # The parked subtasks are the coordinator's own: it checkpoints with them.
            wait_until(lambda: coordinator.trigger() is not None, what="both are ready")
            assert endpoint.parked() == 0
        finally:
            coordinator.stop()

    def test_after_the_coordinator_attaches_a_registration_is_answered_at_once(
            self, endpoint: CoordinatorEndpoint, tmp_path: Path) -> None:
        coordinator = coordinator_on(endpoint, tmp_path, attempt=1)
        try:
            assert StandIn(port=endpoint.port, epoch=1).register() == Registered(
                attempt=1, restore=None)
        finally:
            coordinator.stop()

    def test_a_relaunched_stage_refuses_the_older_attempts_subtasks_and_holds_only_its_own(
            self, endpoint: CoordinatorEndpoint) -> None:
        old = parked_stand_ins(endpoint, epoch=3)
        new = StandIn(port=endpoint.port, subtask=0, epoch=4)
        new.send_registration()
        for s in old:
            assert s.conn.receive() == Rejected(reason="epoch 3 is over")
        assert endpoint.parked() == 1
        late = StandIn(port=endpoint.port, subtask=1, epoch=3)
        late.send_registration()
        assert late.conn.receive() == Rejected(reason="epoch 3 is over")
        assert endpoint.parked() == 1

    def test_anything_but_a_registration_before_the_coordinator_is_dropped(
            self, endpoint: CoordinatorEndpoint, tmp_path: Path) -> None:
        early = StandIn(port=endpoint.port, subtask=0, epoch=1)
        early.conn.send(Ready(epoch=1, subtask=0))
        parked = StandIn(port=endpoint.port, subtask=1, epoch=1)
        parked.send_registration()
        assert endpoint.wait_parked(1, timeout=30)
        assert endpoint.parked() == 1
        coordinator = coordinator_on(endpoint, tmp_path, attempt=1)
        try:
            assert parked.conn.receive() == Registered(attempt=1, restore=None)
            # The dropped Ready did not count: one subtask is still missing.
            assert coordinator.trigger() is None
        finally:
            coordinator.stop()

    def test_a_second_coordinator_cannot_attach(self, endpoint: CoordinatorEndpoint,
                                                tmp_path: Path) -> None:
        coordinator = coordinator_on(endpoint, tmp_path, attempt=1)
        try:
            with pytest.raises(RuntimeError, match="already attached"):
                endpoint.attach(lambda conn, message: None)
        finally:
            coordinator.stop()
