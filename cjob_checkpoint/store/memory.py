"""In-memory completed-checkpoint store and id counter.

Nothing survives the process, so these serve tests and jobs that are never
restored (like Flink's standalone store). They are the one store of
:mod:`cjob_checkpoint.store.backed` over a backend that keeps the state in a
variable, so they follow exactly the rules of the durable stores.
"""

from __future__ import annotations

import itertools
import threading

from cjob_checkpoint.store.backed import BackedCheckpointIdCounter, BackedCheckpointStore
from cjob_checkpoint.store.backend import RetryPolicy, SwapConflictError
from cjob_checkpoint.store.completed_store import (
    CompletedCheckpoint,
    Discarder,
    JobOutcome,
    StoreError,
)
from cjob_checkpoint.store.retention import InvalidRetentionError
from cjob_checkpoint.store.state import StoreState

__all__ = [
    "InMemoryCheckpointIdCounter",
    "InMemoryCheckpointStore",
    "InvalidRetentionError",
    "MemoryBackend",
]

_WHERE = "memory"


class MemoryBackend:
    """A store's state in a variable; the version is a generation number."""

    retry_policy = RetryPolicy(max_attempts=10_000, deadline=60.0)
    """Only threads of this process compete, and they never wait on I/O."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generations = itertools.count(1)
        self._state = StoreState(version="0")

    def read(self) -> StoreState:
        with self._lock:
            return self._state

    def compare_and_swap(self, *, expected: StoreState, new: StoreState,
                         operation: str) -> StoreState:
        with self._lock:
            if self._state.version != expected.version:
                raise SwapConflictError(operation)
            self._state = StoreState(
                version=str(next(self._generations)), fence=new.fence, counter=new.counter,
                pointers=dict(new.pointers), unreadable=dict(new.unreadable),
                markers=dict(new.markers), restore_report=new.restore_report,
                staged_inputs=new.staged_inputs, holds=new.holds)
            return self._state

    def locate(self, checkpoint_id: int) -> str:
        return f"{_WHERE}#{checkpoint_id}"

    def check_budget(self, state: StoreState) -> None:
        return None

    def gave_up(self, *, operation: str, conflicts: bool, attempts: int,
                cause: str) -> StoreError:
        return StoreError(f"could not {operation} in the in-memory store after {attempts} "
                          f"tries ({cause})")


class InMemoryCheckpointStore(BackedCheckpointStore):
    """Keeps the ``retained`` newest checkpoints (by id) in memory.

    Without an ``attempt`` the store belongs to whichever attempt its process runs:
    nothing outlives the process, so there is no older writer to fence, and the
    first restore report recorded names the attempt.
    """

    def __init__(self, *, retained: int = 1, discard_on_terminal: bool = False,
                 attempt: int | None = None, backend: MemoryBackend | None = None) -> None:
        super().__init__(backend=backend or MemoryBackend(), where=_WHERE, retained=retained,
                         attempt=attempt or 0, discard_on_terminal=discard_on_terminal)
        self._adopts_attempt = attempt is None

    def _write_restore_report(self, text: str, *, attempt: int) -> None:
        if self._adopts_attempt and attempt > self.attempt:
            self.attempt = attempt
        super()._write_restore_report(text, attempt=attempt)

    def marked_for_discard(self) -> list[CompletedCheckpoint]:
        """Checkpoints pruned from the store whose data is not deleted yet."""
        return self.marked_checkpoints()

    def shutdown(self, status: JobOutcome, *, discard: Discarder) -> None:
        """Like the durable stores, but the store stays open: nothing outlives the
        process anyway, and tests end one job's life in several steps."""
        self._discard_if_terminal(status, discard=discard)


class InMemoryCheckpointIdCounter(BackedCheckpointIdCounter):
    """A thread-safe counter starting at ``start`` (1, like Flink)."""

    def __init__(self, *, start: int = 1, attempt: int = 0,
                 backend: MemoryBackend | None = None) -> None:
        super().__init__(backend=backend or MemoryBackend(), where=_WHERE, attempt=attempt,
                         start=start)
