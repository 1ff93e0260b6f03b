"""The checkpoint coordinator while the apiserver behind its store hangs.

The coordinator's id counter, its manual-trigger requests and its store all
live in a ConfigMap. Here they talk to the real apiserver through a proxy that
can stop answering (it accepts requests and holds them). Subtasks are stand-ins
on the coordinator's real RPC endpoint. A hung apiserver must never freeze the
coordinator: messages from subtasks are still handled, the stuck call times
out and counts as a failed checkpoint, and checkpointing resumes once the
apiserver answers again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest
from store_configmap_support import LossyApiProxy, StoreWorld

from cjob_checkpoint.store.configmap import ConfigMapCheckpointIdCounter
from cjob_checkpoint.store.configmap_triggers import ConfigMapTriggerSource
from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.coordinator.coordinator import CheckpointCoordinator
from job_runtime.coordinator.messages import (
    Abort,
    Ack,
    AckState,
    AckStats,
    ChannelAddress,
    Complete,
    Decline,
    Peers,
    Ready,
    Register,
    Registered,
    Trigger,
)
from job_runtime.coordinator.rpc import SubtaskConnection, connect
from job_runtime.errors import CheckpointFailureBudgetExceeded

WAIT = 30.0
QUICK = (1.0, 1.0)
"""Connect and read timeouts of the coordinator's apiserver calls in these tests."""
KEY = b"k" * 32
M = TypeVar("M", Trigger, Complete, Abort)


class StandIn:
    """One subtask's side of the coordinator protocol, over a loopback socket."""

    def __init__(self, coordinator: CheckpointCoordinator, *, subtask: int) -> None:
        self.conn: SubtaskConnection = connect("127.0.0.1", coordinator.port, key=KEY)
        self.conn.sock.settimeout(WAIT)  # an unanswered message fails the test, not hangs it
        self.subtask = subtask

    def join(self) -> None:
        self.conn.send(Register(epoch=1, subtask=self.subtask, host="localhost", pid=0,
                                channel=ChannelAddress(host="127.0.0.1", port=1)))
        assert isinstance(self.conn.receive(), Registered)

    def ready(self) -> None:
        self.conn.send(Ready(epoch=1, subtask=self.subtask))

    def decline(self, checkpoint_id: int, *, reason: str) -> None:
        self.conn.send(Decline(epoch=1, subtask=self.subtask, checkpoint_id=checkpoint_id,
                               reason=reason))

    def expect(self, kind: type[M]) -> M:
        """The next message of ``kind``, passing over the peers (sent once both
        registered) and other checkpoint messages."""
        while True:
            got = self.conn.receive()
            if isinstance(got, kind):
                return got
            assert isinstance(got, (Peers, Trigger, Complete, Abort)), got

    def ack(self, checkpoint_id: int) -> None:
        self.conn.send(Ack(epoch=1, subtask=self.subtask, checkpoint_id=checkpoint_id, stage=0,
                           state=AckState(sources={str(self.subtask): checkpoint_id}),
                           stats=AckStats(bytes=10)))


def wait_until(condition: Any, *, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


@pytest.fixture
def coordinator_for(world: StoreWorld, lossy_proxy: LossyApiProxy) -> Iterator[Any]:
    """Build a coordinator whose counter, triggers and store go through the proxy."""
    built: list[CheckpointCoordinator] = []

    def build(*, interval: float, tolerable: int) -> CheckpointCoordinator:
        api = lossy_proxy.api()
        counter = ConfigMapCheckpointIdCounter(api=api, namespace=world.namespace,
                                               name=world.name, attempt=1,
                                               request_timeout=QUICK, deadline=2.0)
        triggers = ConfigMapTriggerSource(api=api, namespace=world.namespace, name=world.name,
                                          request_timeout=QUICK)
        coordinator = CheckpointCoordinator(
            job_id=f"{world.job_name}-uid1", attempt=1, parallelism=2, max_parallelism=128,
            stages=1, storage=world.storage,
            store=world.store(api=api, request_timeout=QUICK, deadline=2.0),
            counter=counter,
            settings=CheckpointSettings(interval=interval, tolerable_failures=tolerable,
                                        max_concurrent=2, trigger_poll_interval=0.2),
            initial_restore=None, initial_restore_pointer=None, key=KEY,
            triggers=triggers)
        built.append(coordinator)
        return coordinator

    yield build
    for coordinator in built:
        coordinator.stop()


def test_a_decline_is_handled_while_the_commit_of_another_checkpoint_hangs(
        coordinator_for: Any, lossy_proxy: LossyApiProxy) -> None:
    coordinator = coordinator_for(interval=0.0, tolerable=10)
    subtasks = [StandIn(coordinator, subtask=i) for i in range(2)]
    for s in subtasks:
        s.join()
        s.ready()
    wait_until(lambda: coordinator.trigger() is not None, what="a checkpoint is triggered")
    first = subtasks[0].expect(Trigger).checkpoint_id
    second = coordinator.trigger()
    assert second is not None

    lossy_proxy.hang()
    for s in subtasks:
        s.ack(first)  # every task acknowledged: the commit now waits for the apiserver
    wait_until(lambda: lossy_proxy.hung, what="the commit waits for the hung apiserver")
    subtasks[1].decline(second, reason="upload failed")

    aborted = subtasks[0].expect(Abort).checkpoint_id
    assert aborted == second, "the decline waited for the hung commit"
    assert subtasks[0].expect(Abort).checkpoint_id == first, \
        "the hung commit never gave up"
    assert coordinator.stats.failed == 2
    assert coordinator.failure is None


def test_a_trigger_that_cannot_get_an_id_counts_against_the_tolerable_failures(
        coordinator_for: Any, lossy_proxy: LossyApiProxy) -> None:
    coordinator = coordinator_for(interval=0.2, tolerable=0)
    subtasks = [StandIn(coordinator, subtask=i) for i in range(2)]
    for s in subtasks:
        s.join()
    lossy_proxy.hang()
    for s in subtasks:
        s.ready()

    assert coordinator.failed_event.wait(WAIT), "the hung id counter never counted as a failure"
    assert isinstance(coordinator.failure, CheckpointFailureBudgetExceeded)
    assert "checkpoint id" in str(coordinator.failure)


def test_checkpointing_resumes_when_the_apiserver_answers_again(
        coordinator_for: Any, lossy_proxy: LossyApiProxy, world: StoreWorld,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="job_runtime.coordinator.coordinator")
    coordinator = coordinator_for(interval=0.2, tolerable=1000)
    subtasks = [StandIn(coordinator, subtask=i) for i in range(2)]
    for s in subtasks:
        s.join()
    lossy_proxy.hang()
    for s in subtasks:
        s.ready()
    wait_until(lambda: coordinator.stats.failed >= 2,
               what="two triggers fail on the hung id counter")
    assert coordinator.failure is None

    lossy_proxy.resume()
    checkpoint_id = subtasks[0].expect(Trigger).checkpoint_id
    for s in subtasks:
        s.ack(checkpoint_id)
    assert subtasks[1].expect(Complete).checkpoint_id == checkpoint_id
    latest = world.store().latest()
    assert latest is not None and latest.checkpoint_id == checkpoint_id
    streak = [r for r in caplog.records if r.levelno == logging.WARNING
              and "cannot start a checkpoint" in r.getMessage()]
    assert len(streak) == 1, "one streak of failed triggers is logged once"
