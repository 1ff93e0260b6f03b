"""In-memory completed-checkpoint store and id counter.

Nothing survives the process, so these serve tests and jobs that are never
restored (like Flink's standalone store). They follow the same rules as the
durable stores: add before prune, never prune the newest, keep a checkpoint
whose data could not be deleted and retry on the next add.
"""

from __future__ import annotations

import logging
import threading

from job_runtime.store.base import (
    CheckpointIdCounter,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    Discarder,
    JobStatus,
)
from job_runtime.store.retention import InvalidRetentionError, ensure_retained, ids_to_prune

_log = logging.getLogger(__name__)

__all__ = ["InMemoryCheckpointIdCounter", "InMemoryCheckpointStore", "InvalidRetentionError"]


class InMemoryCheckpointStore(CompletedCheckpointStore):
    """Keeps the ``retained`` newest checkpoints (by id) in a dict."""

    def __init__(self, *, retained: int = 1, discard_on_terminal: bool = False) -> None:
        self.retained = ensure_retained(retained)
        self.discard_on_terminal = discard_on_terminal
        self._lock = threading.Lock()
        self._checkpoints: dict[int, CompletedCheckpoint] = {}
        self._marked: dict[int, CompletedCheckpoint] = {}

    def add_checkpoint_and_subsume_oldest(
        self, checkpoint: CompletedCheckpoint, *, discard: Discarder
    ) -> list[CompletedCheckpoint]:
        with self._lock:
            self._checkpoints[checkpoint.checkpoint_id] = checkpoint
            self._marked.pop(checkpoint.checkpoint_id, None)
            for old_id in ids_to_prune(list(self._checkpoints), retained=self.retained):
                self._marked[old_id] = self._checkpoints.pop(old_id)
            return self._discard_marked(discard)

    def _discard_marked(self, discard: Discarder) -> list[CompletedCheckpoint]:
        discarded: list[CompletedCheckpoint] = []
        for old_id in sorted(self._marked):
            old = self._marked[old_id]
            try:
                discard(old)
            except Exception as exc:
                _log.warning("could not discard checkpoint %d (%s); will retry on the next add: %s",
                             old_id, old.metadata_path, exc)
                self._pruning_failed()
                continue
            del self._marked[old_id]
            discarded.append(old)
        return discarded

    def latest(self) -> CompletedCheckpoint | None:
        with self._lock:
            if not self._checkpoints:
                return None
            return self._checkpoints[max(self._checkpoints)]

    def all(self) -> list[CompletedCheckpoint]:
        with self._lock:
            return [self._checkpoints[i] for i in sorted(self._checkpoints)]

    def marked_for_discard(self) -> list[CompletedCheckpoint]:
        """Checkpoints pruned from the store whose data is not deleted yet."""
        with self._lock:
            return [self._marked[i] for i in sorted(self._marked)]

    def shutdown(self, status: JobStatus, *, discard: Discarder) -> None:
        """Keep everything unless the job is globally terminal and
        ``discard_on_terminal`` was set (see :class:`FileCheckpointStore`)."""
        with self._lock:
            if status.is_globally_terminal and self.discard_on_terminal:
                self._marked.update(self._checkpoints)
                self._checkpoints.clear()
                self._discard_marked(discard)


class InMemoryCheckpointIdCounter(CheckpointIdCounter):
    """A thread-safe counter starting at ``start`` (1, like Flink)."""

    def __init__(self, *, start: int = 1) -> None:
        self._lock = threading.Lock()
        self._next = start

    def get_and_increment(self) -> int:
        with self._lock:
            value = self._next
            self._next += 1
            return value

    def get(self) -> int:
        with self._lock:
            return self._next

    def set_count(self, count: int) -> None:
        with self._lock:
            self._next = max(self._next, count)
