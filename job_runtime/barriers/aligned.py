"""Aligned exactly-once barrier handling (Flink's ``CheckpointBarrierAligner``)."""

from __future__ import annotations

from job_runtime.barriers.handler import BarrierHandler


class AlignedBarrierHandler(BarrierHandler):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._blocked: set[int] = set()
        self._aligning = False

    @property
    def blocked(self) -> frozenset[int]:
        return frozenset(self._blocked)

    def _release(self) -> None:
        self._blocked.clear()
        self._aligning = False

    def _maybe_complete(self) -> None:
        if self._aligning and len(self._blocked | self.closed) >= self.channels:
            checkpoint_id = self.current_id
            alignment = self._now() - self._started
            self._release()
            self.listener.on_snapshot(checkpoint_id, alignment_seconds=alignment)

    def on_barrier(self, channel: int, checkpoint_id: int) -> None:
        if checkpoint_id > self.current_id:
            if self._aligning:
                previous = self.current_id
                self._release()
                self.listener.on_abort(previous, reason=f"subsumed by barrier {checkpoint_id}",
                                       forward_cancel=False)
            self.current_id = checkpoint_id
            self._aligning = True
            self._started = self._now()
            self._blocked = {channel}
        elif checkpoint_id == self.current_id and self._aligning:
            self._blocked.add(channel)
        else:
            return  # a late barrier of a checkpoint that was aborted or is done
        self._maybe_complete()

    def on_cancel(self, channel: int, checkpoint_id: int) -> None:
        if checkpoint_id == self.current_id and self._aligning:
            self._release()
            self.listener.on_abort(checkpoint_id, reason="cancel marker", forward_cancel=True)
        elif checkpoint_id > self.current_id:
            if self._aligning:
                previous = self.current_id
                self._release()
                self.listener.on_abort(previous, reason=f"subsumed by cancel {checkpoint_id}",
                                       forward_cancel=False)
            self.current_id = checkpoint_id
            self.listener.on_abort(checkpoint_id, reason="cancel marker", forward_cancel=True)

    def abort_pending(self, checkpoint_id: int, *, reason: str) -> None:
        if checkpoint_id == self.current_id and self._aligning:
            self._release()
            self.listener.on_abort(checkpoint_id, reason=reason, forward_cancel=True)
        elif checkpoint_id > self.current_id:
            self.current_id = checkpoint_id
            self.listener.on_abort(checkpoint_id, reason=reason, forward_cancel=True)

    def on_end_of_partition(self, channel: int) -> None:
        self.closed.add(channel)
        self._blocked.discard(channel)
        self._maybe_complete()
