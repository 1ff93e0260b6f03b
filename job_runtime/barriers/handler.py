"""What barrier handlers share: the listener they call and the bookkeeping of channels."""

from __future__ import annotations

import abc
import time
from typing import Protocol

from job_runtime.records import Batch


class BarrierListener(Protocol):
    """The task behind a handler."""

    def on_snapshot(self, checkpoint_id: int, *, alignment_seconds: float) -> None:
        """Take the task's snapshot for ``checkpoint_id`` and forward the barrier."""

    def on_abort(self, checkpoint_id: int, *, reason: str, forward_cancel: bool) -> None:
        """Checkpoint ``checkpoint_id`` will not complete in this task."""

    def on_channel_state(self, checkpoint_id: int, state: dict[int, list[Batch]]) -> None:
        """Unaligned only: the in-flight data of every channel is complete."""


class BarrierHandler(abc.ABC):
    def __init__(self, *, channels: int, listener: BarrierListener) -> None:
        self.channels = channels
        self.listener = listener
        self.closed: set[int] = set()
        self.current_id = -1
        self._started = 0.0

    @property
    def blocked(self) -> frozenset[int]:
        return frozenset()

    @abc.abstractmethod
    def on_barrier(self, channel: int, checkpoint_id: int) -> None: ...

    @abc.abstractmethod
    def on_cancel(self, channel: int, checkpoint_id: int) -> None: ...

    @abc.abstractmethod
    def on_end_of_partition(self, channel: int) -> None: ...

    def on_final_barrier(self, channel: int, checkpoint_id: int) -> None:
        """The barrier of the final checkpoint, which follows the last record of ``channel``.

        Aligned and at-least-once handling already snapshot only after every
        channel's barrier, so it is an ordinary barrier for them.
        """
        self.on_barrier(channel, checkpoint_id)

    def on_data(self, channel: int, batch: Batch) -> None:  # noqa: B027 - unaligned only
        """A data buffer of ``channel`` is about to be processed."""

    def on_priority_barrier(self, channel: int, checkpoint_id: int, ahead: list[Batch]) -> None:
        """A barrier that overtook ``ahead``; only unaligned handlers receive these."""
        raise NotImplementedError

    def abort_pending(self, checkpoint_id: int, *, reason: str) -> None:  # noqa: B027
        """The coordinator aborted ``checkpoint_id``: stop waiting for its barriers."""

    @staticmethod
    def _now() -> float:
        return time.monotonic()
