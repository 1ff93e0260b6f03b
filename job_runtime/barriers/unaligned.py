"""Unaligned exactly-once checkpoints: barriers overtake data, which becomes channel state.

The final checkpoint is the exception: it is aligned. Its snapshot is the last
one whose output a sink commits, so the records it overtook would be replayed
by nobody; and since every source has finished, alignment waits only for the
data already in flight, which is what an unaligned barrier exists to avoid
waiting for under continuing backpressure.
"""

from __future__ import annotations

from job_runtime.barriers.handler import BarrierHandler
from job_runtime.records import Batch


class UnalignedBarrierHandler(BarrierHandler):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._pending = False
        self._arrived: set[int] = set()
        self._state: dict[int, list[Batch]] = {}
        self._aligning = False
        self._blocked: set[int] = set()

    @property
    def blocked(self) -> frozenset[int]:
        return frozenset(self._blocked)

    def _subsume(self, checkpoint_id: int) -> None:
        if self._pending or self._aligning:
            self._pending = False
            self._aligning = False
            self._blocked = set()
            self._state = {}
            self.listener.on_abort(self.current_id,
                                   reason=f"subsumed by barrier {checkpoint_id}",
                                   forward_cancel=False)

    def _start(self, checkpoint_id: int) -> None:
        self._subsume(checkpoint_id)
        self.current_id = checkpoint_id
        self._pending = True
        self._arrived = set()
        self._state = {c: [] for c in range(self.channels) if c not in self.closed}
        self._started = self._now()
        self.listener.on_snapshot(checkpoint_id, alignment_seconds=0.0)

    def _maybe_complete(self) -> None:
        if self._aligning and len(self._blocked | self.closed) >= self.channels:
            self._aligning = False
            self._blocked = set()
            self.listener.on_snapshot(self.current_id,
                                      alignment_seconds=self._now() - self._started)
        if self._pending and len(self._arrived | self.closed) >= self.channels:
            self._pending = False
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

    def on_final_barrier(self, channel: int, checkpoint_id: int) -> None:
        if checkpoint_id > self.current_id:
            self._subsume(checkpoint_id)
            self.current_id = checkpoint_id
            self._aligning = True
            self._blocked = {channel}
            self._started = self._now()
        elif checkpoint_id == self.current_id and self._aligning:
            self._blocked.add(channel)
        else:
            return
        self._maybe_complete()

    def on_barrier(self, channel: int, checkpoint_id: int) -> None:
        # Barriers that were not pulled out ahead (e.g. in tests) carry nothing in front.
        self.on_priority_barrier(channel, checkpoint_id, [])

    def on_data(self, channel: int, batch: Batch) -> None:
        if self._pending and channel not in self._arrived:
            self._state.setdefault(channel, []).append(batch)

    def _abort(self, checkpoint_id: int, *, reason: str) -> None:
        active = self._pending or self._aligning
        if checkpoint_id >= self.current_id and (active or checkpoint_id > self.current_id):
            if checkpoint_id > self.current_id:
                self._subsume(checkpoint_id)
            self._pending = False
            self._aligning = False
            self._blocked = set()
            self.current_id = checkpoint_id
            self._state = {}
            self.listener.on_abort(checkpoint_id, reason=reason, forward_cancel=True)

    def on_cancel(self, channel: int, checkpoint_id: int) -> None:
        self._abort(checkpoint_id, reason="cancel marker")

    def abort_pending(self, checkpoint_id: int, *, reason: str) -> None:
        self._abort(checkpoint_id, reason=reason)

    def on_end_of_partition(self, channel: int) -> None:
        self.closed.add(channel)
        self._blocked.discard(channel)
        self._maybe_complete()
