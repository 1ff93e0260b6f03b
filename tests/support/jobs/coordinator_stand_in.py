"""A subtask's side of the coordinator protocol, spoken by a test instead of a task.

The coordinator tests drive a real :class:`CheckpointCoordinator` over its real,
authenticated RPC; this stand-in registers, acknowledges and declines as a
subtask would, with whatever state a test wants in its acknowledgements.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

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
    ToSubtask,
    Trigger,
)
from job_runtime.coordinator.rpc import SubtaskConnection, connect

KEY = b"k" * 32
"""The attempt's key the coordinators of these tests are made with."""
WAIT = 30.0
M = TypeVar("M", Peers, Trigger, Complete, Abort)


class StandIn:
    """One subtask's connection to the coordinator."""

    def __init__(self, *, port: int, subtask: int = 0, epoch: int = 1) -> None:
        self.conn: SubtaskConnection = connect("127.0.0.1", port, key=KEY)
        self.conn.sock.settimeout(WAIT)  # an unanswered message fails the test, not hangs it
        self.subtask = subtask
        self.epoch = epoch

    def register(self) -> ToSubtask:
        self.send_registration()
        return self.conn.receive()

    def send_registration(self) -> None:
        """Register without waiting for the answer (a parked subtask waits for it)."""
        self.conn.send(Register(epoch=self.epoch, subtask=self.subtask, host="localhost",
                                pid=0, channel=self.channel))

    @property
    def channel(self) -> ChannelAddress:
        """The channel address this stand-in says it listens at (nothing listens)."""
        return ChannelAddress(host="127.0.0.1", port=40000 + self.subtask)

    def ready(self) -> None:
        self.conn.send(Ready(epoch=self.epoch, subtask=self.subtask))

    def decline(self, checkpoint_id: int, *, reason: str, subsumed: bool = False) -> None:
        self.conn.send(Decline(epoch=self.epoch, subtask=self.subtask,
                               checkpoint_id=checkpoint_id, reason=reason, subsumed=subsumed))

    def expect(self, kind: type[M]) -> M:
        """The next message of ``kind``, passing over the peers and other checkpoint
        messages."""
        while True:
            got = self.conn.receive()
            if isinstance(got, kind):
                return got
            assert isinstance(got, (Peers, Trigger, Complete, Abort)), got

    def ack(self, checkpoint_id: int, *, state: AckState) -> None:
        self.conn.send(Ack(epoch=self.epoch, subtask=self.subtask, checkpoint_id=checkpoint_id,
                           stage=0, state=state, stats=AckStats(bytes=10)))


def wait_until(condition: Callable[[], object], *, what: str) -> None:
    """Poll ``condition`` until it holds; fail the test after :data:`WAIT` seconds."""
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)
