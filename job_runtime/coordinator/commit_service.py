"""Committing a checkpoint every task acknowledged: write its ``_metadata``, add its
pointer to the completed-checkpoint store, delete the shared files the store's prune
left unreferenced, and say what came of it as a :class:`CommitOutcome`.

The calls here reach storage and the apiserver, so they run on the coordinator's
worker thread with no lock of the coordinator held; the coordinator applies the
outcome (completes, aborts or fails the job) under its lock afterwards. Which failures
let the abort delete the checkpoint's data is decided here, where it is known whether
the pointer can have reached the store.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata
from cjob_checkpoint.shared_state import SharedStateRegistry
from cjob_checkpoint.store.completed_store import (
    AmbiguousWriteError,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    FencedError,
    StoreFullError,
)
from job_runtime.coordinator.abort_reason import AbortReason
from job_runtime.faults import maybe_fail

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommitOutcome:
    """What the storage and store calls of one commit produced (decided outside the lock)."""

    completed: CompletedCheckpoint | None = None
    reason: AbortReason | None = None
    """Why the commit failed, unless it completed or was fenced (then ``failure`` says how)."""
    failure: str = ""
    keep_data: bool = False
    fenced: FencedError | None = None
    prune_failures: int = 0


class CommitService:
    """The storage and store side of completing checkpoints, for one attempt."""

    def __init__(self, *, storage: CheckpointStorage, store: CompletedCheckpointStore,
                 attempt: int, clock: Callable[[], float],
                 restored: CheckpointMetadata | None = None) -> None:
        self.storage = storage
        self.store = store
        self.attempt = attempt
        self.clock = clock
        self.shared_state = SharedStateRegistry(storage=storage)
        """Deletes the shared files of incremental snapshots once nothing retained uses them."""
        if restored is not None:
            self.shared_state.remember(restored.checkpoint_id, restored)

    def commit(self, metadata: CheckpointMetadata, *, state_bytes: int) -> CommitOutcome:
        """Write ``metadata`` and commit its pointer; ``state_bytes``: what the tasks
        wrote (the pointer records it with the metadata's own size)."""
        checkpoint_id = metadata.checkpoint_id
        stale = self.shared_state.stale(metadata)
        if stale:
            # A subtask reused a file of a checkpoint pruned meanwhile (see
            # shared_state): this checkpoint would not restore, so it fails.
            return CommitOutcome(
                reason=AbortReason.STALE_SHARED_FILES,
                failure=f"it references {len(stale)} shared file(s) deleted with an older "
                        f"checkpoint, e.g. {stale[0]}")
        self.shared_state.remember(checkpoint_id, metadata)
        body = metadata.to_bytes()
        return self._write_and_commit(checkpoint_id, body=body, size=state_bytes + len(body))

    def _write_and_commit(self, checkpoint_id: int, *, body: bytes, size: int) -> CommitOutcome:
        """The storage and store calls of a commit.

        Only errors that prove the pointer was *not* committed let the abort delete
        the checkpoint's data. Any other error may come after the commit (a store
        whose pruning raised): then the data is what the committed pointer names,
        and deleting it would leave the job's newest restorable checkpoint empty.
        """
        try:
            maybe_fail("driver.before-metadata", checkpoint_id)
            path = self.storage.write_metadata(checkpoint_id, body)
            maybe_fail("driver.before-pointer", checkpoint_id)
            completed = CompletedCheckpoint(
                checkpoint_id=checkpoint_id, metadata_path=path, timestamp=self.clock(),
                size_bytes=size, attempt=self.attempt)
        except Exception as exc:
            log.warning("checkpoint %d could not be committed: %s", checkpoint_id, exc)
            return CommitOutcome(reason=AbortReason.COMMIT_FAILED,
                                 failure=f"commit failed: {exc}")
        failures_before = self.store.prune_failures
        try:
            self.store.add_checkpoint_and_subsume_oldest(completed,
                                                         discard=self.shared_state.discard)
        except FencedError as exc:
            return CommitOutcome(fenced=exc)
        except AmbiguousWriteError as exc:
            # The pointer may have landed: its data must stay, and the sinks must not
            # commit (a restore might still pick the previous checkpoint). The next
            # completed checkpoint settles it.
            log.warning("checkpoint %d: outcome of the store write unknown: %s",
                        checkpoint_id, exc)
            return CommitOutcome(reason=AbortReason.STORE_WRITE_AMBIGUOUS,
                                 failure=f"store write ambiguous: {exc}", keep_data=True)
        except StoreFullError as exc:
            log.warning("checkpoint %d could not be committed: %s", checkpoint_id, exc)
            return CommitOutcome(reason=AbortReason.COMMIT_FAILED,
                                 failure=f"commit failed: {exc}")
        except Exception as exc:
            log.warning("checkpoint %d: the store failed, possibly after committing the pointer; "
                        "its data stays: %s", checkpoint_id, exc)
            return CommitOutcome(reason=AbortReason.STORE_FAILED,
                                 failure=f"store failed: {exc}", keep_data=True)
        self.delete_unreferenced_shared(checkpoint_id)
        return CommitOutcome(completed=completed,
                             prune_failures=self.store.prune_failures - failures_before)

    def delete_unreferenced_shared(self, checkpoint_id: int) -> None:
        """After a prune: shared files no retained checkpoint references go (best effort)."""
        try:
            retained = self.store.all(skip_corrupt=True)
            deleted = self.shared_state.delete_unreferenced(retained,
                                                            checkpoint_id=checkpoint_id)
        except Exception as exc:  # a leak, never a failed checkpoint
            log.warning("checkpoint %d: unreferenced shared files not deleted: %s",
                        checkpoint_id, exc)
            return
        if deleted:
            log.info("checkpoint %d: deleted %d shared file(s) no retained checkpoint uses",
                     checkpoint_id, len(deleted))

    def discard_pending(self, checkpoint_id: int) -> None:
        """Delete an aborted checkpoint's data (a storage call: no lock held)."""
        try:
            self.storage.discard_pending(checkpoint_id)
        except Exception as exc:
            log.warning("could not delete the data of aborted checkpoint %d: %s",
                        checkpoint_id, exc)
