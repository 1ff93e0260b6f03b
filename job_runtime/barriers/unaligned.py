"""Unaligned exactly-once checkpoints: barriers overtake data, which becomes channel state."""

from __future__ import annotations

from job_runtime.barriers.base import BarrierHandler
from job_runtime.records import Batch


class UnalignedBarrierHandler(BarrierHandler):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._pending = False
        self._arrived: set[int] = set()
        self._state: dict[int, list[Batch]] = {}

    def _start(self, checkpoint_id: int) -> None:
        if self._pending:
            self.listener.on_abort(self.current_id,
                                   reason=f"subsumed by barrier {checkpoint_id}",
                                   forward_cancel=False)
        self.current_id = checkpoint_id
        self._pending = True
        self._arrived = set()
        self._state = {c: [] for c in range(self.channels) if c not in self.closed}
        self._started = self._now()
        self.listener.on_snapshot(checkpoint_id, alignment_seconds=0.0)

    def _maybe_complete(self) -> None:
        if self._pending and len(self._arrived | self.closed) >= self.channels:
            self._pending = False
            self.completed_id = self.current_id
            self.listener.on_channel_state(self.current_id, self._state)
            self._state = {}

    def on_priority_barrier(self, channel: int, checkpoint_id: int, ahead: list[Batch]) -> None:
        if checkpoint_id > self.current_id:
            self._start(checkpoint_id)
        elif checkpoint_id != self.current_id or not self._pending:
            return
        self._arrived.add(channel)
        self._state.setdefault(channel, []).extend(ahead)
        self._maybe_complete()

    def on_barrier(self, channel: int, checkpoint_id: int) -> None:
        # Barriers that were not pulled out ahead (e.g. in tests) carry nothing in front.
        self.on_priority_barrier(channel, checkpoint_id, [])

    def on_data(self, channel: int, batch: Batch) -> None:
        if self._pending and channel not in self._arrived:
            self._state.setdefault(channel, []).append(batch)

    def on_cancel(self, channel: int, checkpoint_id: int) -> None:
        if checkpoint_id >= self.current_id and (self._pending or checkpoint_id > self.current_id):
            self._pending = False
            self.current_id = checkpoint_id
            self._state = {}
            self.listener.on_abort(checkpoint_id, reason="cancel marker", forward_cancel=True)

    def abort_pending(self, checkpoint_id: int, *, reason: str) -> None:
        if checkpoint_id >= self.current_id and (self._pending or checkpoint_id > self.current_id):
            self._pending = False
            self.current_id = checkpoint_id
            self._state = {}
            self.listener.on_abort(checkpoint_id, reason=reason, forward_cancel=True)

    def on_end_of_partition(self, channel: int) -> None:
        self.closed.add(channel)
        self._maybe_complete()
