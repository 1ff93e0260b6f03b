"""Statistics of the most recent checkpoints, as Flink's web UI shows them."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any


@dataclasses.dataclass(kw_only=True)
class CheckpointStats:
    checkpoint_id: int
    triggered_at: float
    status: str = "IN_PROGRESS"
    final: bool = False
    duration_ms: float = 0.0
    size_bytes: int = 0
    alignment_ms_max: float = 0.0
    sync_ms_max: float = 0.0
    async_ms_max: float = 0.0
    failure: str | None = None
    acks: int = 0
    # Pruning steps of older checkpoints that failed while this one was added
    # (the checkpoint itself completed; the store retries on the next add).
    prune_failures: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class CheckpointStatsTracker:
    """Keeps the last ``history`` checkpoints and running counts."""

    def __init__(self, *, history: int = 100) -> None:
        self.history: collections.deque[CheckpointStats] = collections.deque(maxlen=history)
        self.completed = 0
        self.failed = 0

    def started(self, stats: CheckpointStats) -> None:
        self.history.append(stats)

    def finished(self, stats: CheckpointStats, *, ok: bool) -> None:
        stats.status = "COMPLETED" if ok else "FAILED"
        if ok:
            self.completed += 1
        else:
            self.failed += 1

    def trigger_failed(self) -> None:
        """A checkpoint that could not even start (no id): failed, with no entry of its own."""
        self.failed += 1

    def history_dicts(self) -> list[dict[str, Any]]:
        """Every remembered checkpoint (up to ``history``), oldest first."""
        return [s.to_dict() for s in self.history]

    def summary(self) -> dict[str, Any]:
        done = [s for s in self.history if s.status == "COMPLETED"]

        def pct(values: list[float], q: float) -> float:
            if not values:
                return 0.0
            ordered = sorted(values)
            return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]

        return {
            "completed": self.completed,
            "failed": self.failed,
            "durationMsP50": pct([s.duration_ms for s in done], 0.5),
            "durationMsP99": pct([s.duration_ms for s in done], 0.99),
            "syncMsP99": pct([s.sync_ms_max for s in done], 0.99),
            "alignmentMsP99": pct([s.alignment_ms_max for s in done], 0.99),
            "recent": [s.to_dict() for s in list(self.history)[-10:]],
        }
