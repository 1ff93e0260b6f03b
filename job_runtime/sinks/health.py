"""What a sink's writer holds back: the figures behind the sink metrics and the stall
bound, as one value a subtask reports with its progress."""

from __future__ import annotations

import dataclasses

__all__ = ["SinkHealth"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SinkHealth:
    pending_intervals: int = 0
    """Intervals staged whose send has not succeeded yet (their checkpoint may not have
    completed: an interval is pending from its barrier on)."""
    pending_records: int = 0
    pending_bytes: int = 0
    oldest_pending_seconds: float = 0.0
    """How long the oldest interval whose checkpoint completed has waited for its send:
    0 while output flows."""
    dead_letters: int = 0
    """Records routed to a dead-letter destination since the writer opened."""

    def __add__(self, other: SinkHealth) -> SinkHealth:
        return SinkHealth(
            pending_intervals=self.pending_intervals + other.pending_intervals,
            pending_records=self.pending_records + other.pending_records,
            pending_bytes=self.pending_bytes + other.pending_bytes,
            oldest_pending_seconds=max(self.oldest_pending_seconds,
                                       other.oldest_pending_seconds),
            dead_letters=self.dead_letters + other.dead_letters)
