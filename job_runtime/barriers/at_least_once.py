"""At-least-once barrier tracking (Flink's ``CheckpointBarrierTracker``): nothing blocks."""

from __future__ import annotations

from job_runtime.barriers.handler import BarrierHandler


class AtLeastOnceBarrierHandler(BarrierHandler):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._seen: set[int] = set()
        self._pending = False

    def _maybe_complete(self) -> None:
        if self._pending and len(self._seen | self.closed) >= self.channels:
            self._pending = False
            self.listener.on_snapshot(self.current_id,
                                      alignment_seconds=self._now() - self._started)

    def on_barrier(self, channel: int, checkpoint_id: int) -> None:
        if checkpoint_id > self.current_id:
            if self._pending:
                self.listener.on_abort(self.current_id,
                                       reason=f"subsumed by barrier {checkpoint_id}",
                                       forward_cancel=False)
            self.current_id = checkpoint_id
            self._pending = True
            self._seen = {channel}
            self._started = self._now()
        elif checkpoint_id == self.current_id and self._pending:
            self._seen.add(channel)
        else:
            return
        self._maybe_complete()

    def on_cancel(self, channel: int, checkpoint_id: int) -> None:
        if checkpoint_id >= self.current_id and (self._pending or checkpoint_id > self.current_id):
            self._pending = False
            self.current_id = checkpoint_id
            self.listener.on_abort(checkpoint_id, reason="cancel marker", forward_cancel=True)

    def abort_pending(self, checkpoint_id: int, *, reason: str) -> None:
        if checkpoint_id >= self.current_id and (self._pending or checkpoint_id > self.current_id):
            self._pending = False
            self.current_id = checkpoint_id
            self.listener.on_abort(checkpoint_id, reason=reason, forward_cancel=True)

    def on_end_of_partition(self, channel: int) -> None:
        self.closed.add(channel)
        self._maybe_complete()
