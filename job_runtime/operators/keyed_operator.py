"""What every keyed operator provides: records in, state snapshots out, restores at any
parallelism, and event time.

Each operator owns the state of the key groups of its subtask and snapshots it in
two parts: :meth:`KeyedOperator.snapshot` is the synchronous part (references and
flags only, no copies) and returns an object whose ``serialize`` runs later in the
background thread.
"""

from __future__ import annotations

import abc
import traceback
from collections.abc import Callable, Iterable
from typing import Protocol

from job_runtime.errors import UserCodeError
from job_runtime.operators.side_outputs import SideOutputs
from job_runtime.pipeline import KeyedOp
from job_runtime.records import Batch
from job_runtime.sources.source_contract import SourceContext
from job_runtime.state.backend import AnySnapshot, StateBackendSettings
from job_runtime.state.ttl import Clock, wall_clock_ms


class StateSnapshot(Protocol):
    def serialize(self) -> bytes: ...


class KeyedOperator(abc.ABC):
    def __init__(self, *, op: KeyedOp, subtask: int, key_groups: range,
                 max_parallelism: int, state: StateBackendSettings | None = None,
                 clock: Clock = wall_clock_ms) -> None:
        self.op = op
        self.clock = clock
        """Processing time in ms: TTL expiry (tests pass their own)."""
        self.subtask = subtask
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        self.state = state or StateBackendSettings()
        self.late_records = 0
        """Records dropped for coming after their window was gone (windows only)."""
        self.side = SideOutputs()
        """Records routed aside (``ctx.output``, late data), taken by the task after
        each call into the operator."""

    @abc.abstractmethod
    def process(self, batch: Batch) -> Batch: ...

    @abc.abstractmethod
    def snapshot(self) -> AnySnapshot: ...

    @abc.abstractmethod
    def restore(self, blobs: Iterable[bytes]) -> int:
        """Load the owned key groups from state files of any parallelism; returns keys."""

    @abc.abstractmethod
    def key_count(self) -> int: ...

    def open(self, *, sources: SourceContext, cancelled: Callable[[], bool]) -> None:  # noqa: B027
        """The task starts, after any restore: an operator that reads a source of its
        own (``enrich``'s table) starts reading it, with ``sources`` as its context;
        ``cancelled`` says when to stop waiting for it."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """The task ended: release what :meth:`open` started."""

    def notify_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed (an incremental backend reuses its files)."""
        return None

    def _vectorised(self, process: Callable[[Batch], Batch], batch: Batch) -> Batch:
        """``process(batch)`` for an operator that runs no user function: whatever it
        raises (a missing column, a type the numpy code cannot take) is reported as the
        user's error in this operator, with its traceback."""
        try:
            return process(batch)
        except UserCodeError:
            raise
        except Exception as exc:
            raise self._fail(exc) from exc

    def _fail(self, exc: BaseException) -> UserCodeError:
        details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return UserCodeError(operator=self.op.uid, subtask=self.subtask, details=details)

    def on_watermark(self, watermark: int) -> Batch:
        """Event time reached ``watermark``: what fires now (windows, event-time
        timers); nothing for an operator without event time."""
        return Batch(rows=[])

    def on_processing_time(self, now: int) -> Batch:
        """The task looked at the clock (ms since the epoch): what fires now
        (processing-time timers); also when state TTL sweeps run."""
        return Batch(rows=[])
