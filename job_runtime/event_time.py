"""Event time as a batch carries it: read from its column once, kept with the batch.

The source task reads each batch's event times for its watermarks; the window
combiner and a windowed operator in the same stage need them again to assign
windows. A batch that reaches them unchanged carries the times its source read
(:attr:`job_runtime.records.Batch.times`), and the parts a batch is cut into
carry theirs, so the column is parsed once per batch, not once per step.
"""

from __future__ import annotations

import dataclasses
import enum

import numpy as np


class TimeKind(enum.StrEnum):
    """How the event-time column is typed; window bounds come out in the same type."""

    EPOCH_MS = "epoch_ms"
    TIMESTAMP = "timestamp"


@dataclasses.dataclass(frozen=True, kw_only=True)
class EventTimes:
    """The event times of a batch's rows, in the order of its rows."""

    column: str
    """The column they were read from."""
    millis: np.ndarray
    """Milliseconds since the epoch, ``int64``."""
    kind: TimeKind

    def take(self, indices: np.ndarray) -> EventTimes:
        """The times of the rows at ``indices``, for the part of a batch they make."""
        return EventTimes(column=self.column, millis=self.millis[indices], kind=self.kind)
