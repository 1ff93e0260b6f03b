"""The shared-state registry (Flink's ``SharedStateRegistry``): which shared files of
incremental snapshots may be deleted, and deleting them.

An incremental snapshot (a ``rocksdb`` one) references table files in
``<job>/shared/`` that earlier checkpoints uploaded, so discarding a checkpoint's
directory must not delete them. Which files a checkpoint shares is written in its
``_metadata`` (:meth:`~cjob_checkpoint.metadata.CheckpointMetadata.shared_files`),
so the registry needs no state backend: the coordinator holds one and imports none.
The driver runs it on the store's pruning path:

1. ``discard`` (the store's discard callback) reads the discarded checkpoint's
   ``_metadata`` *before* deleting its directory and notes the shared files it
   referenced as candidates.
2. After the store's prune, ``delete_unreferenced`` reads which shared files the
   retained checkpoints reference and deletes the candidates none of them does.

Crash safety, the rules that keep every restorable checkpoint whole:

- Only files a discarded checkpoint referenced are ever candidates; the
  directory is never scanned. A file uploaded for a checkpoint still in flight
  is referenced by no ``_metadata`` yet, so it is never a candidate.
- If the references of any retained checkpoint cannot be read, nothing is
  deleted this time.
- Only files below this job's own shared directory are deleted: after a
  restore of another job's checkpoint its files stay that job's.
- A subtask reuses only files of the last checkpoint it was told completed. In a
  race (that checkpoint pruned while a newer snapshot still referenced one of
  its files), the coordinator asks :meth:`SharedStateRegistry.stale` and fails the
  newer checkpoint instead of completing a broken one.

What may leak: a crash between deleting a checkpoint's directory and deleting
its unreferenced shared files, files of checkpoints that never completed, and
files a retained checkpoint's unreadable ``_metadata`` hid. Leaked files cost
storage, never correctness; they go with the job's directory.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata, MetadataError
from cjob_checkpoint.storage.errors import StorageError
from cjob_checkpoint.store.completed_store import CompletedCheckpoint, UnreadableCheckpointError

log = logging.getLogger(__name__)

REMEMBER_DELETED = 16
"""Checkpoints for which a deleted file is remembered. A subtask reuses files of the
last checkpoint it heard completed, which lags the newest by the notifications in
flight (a few at most), so a reference to a file deleted longer ago cannot arrive."""


class SharedStateRegistry:
    """Reference-checked deletion of one job's shared files (the driver holds one)."""

    def __init__(self, *, storage: CheckpointStorage) -> None:
        self._storage = storage
        self._references: dict[int, frozenset[str]] = {}
        self._candidates: set[str] = set()
        self._deleted: dict[str, int] = {}
        """Shared files this driver deleted, with the checkpoint whose prune deleted them."""

    def remember(self, checkpoint_id: int, metadata: CheckpointMetadata) -> None:
        """The shared files of a checkpoint this driver wrote or restored (saves a read)."""
        self._references[checkpoint_id] = frozenset(metadata.shared_files())

    def references(self, checkpoint: CompletedCheckpoint) -> frozenset[str] | None:
        """Shared files ``checkpoint`` references; ``None`` when its metadata is unreadable."""
        known = self._references.get(checkpoint.checkpoint_id)
        if known is not None:
            return known
        try:
            body = self._storage.read_metadata(checkpoint.metadata_path)
            metadata = CheckpointMetadata.from_bytes(body)
        except (UnreadableCheckpointError, MetadataError, StorageError) as exc:
            log.warning("cannot read which shared files checkpoint %d references: %s",
                        checkpoint.checkpoint_id, exc)
            return None
        references = frozenset(metadata.shared_files())
        self._references[checkpoint.checkpoint_id] = references
        return references

    def discard(self, checkpoint: CompletedCheckpoint) -> None:
        """The store's discard callback: note its shared files, then delete its directory."""
        references = self.references(checkpoint)
        self._storage.discard(checkpoint)
        self._references.pop(checkpoint.checkpoint_id, None)
        if references:
            self._candidates |= references

    def stale(self, metadata: CheckpointMetadata) -> list[str]:
        """Shared files ``metadata`` references that were deleted already."""
        return sorted(metadata.shared_files() & self._deleted.keys())

    def delete_unreferenced(self, retained: Iterable[CompletedCheckpoint], *,
                            checkpoint_id: int) -> list[str]:
        """Delete the candidates no checkpoint of ``retained`` references; returns them.

        ``checkpoint_id`` is the checkpoint whose completion pruned the others.
        """
        self._deleted = {uri: at for uri, at in self._deleted.items()
                         if at > checkpoint_id - REMEMBER_DELETED}
        if not self._candidates:
            return []
        keep: set[str] = set()
        for checkpoint in retained:
            references = self.references(checkpoint)
            if references is None:
                return []
            keep |= references
        own = self._storage.shared_dir.rstrip("/") + "/"
        deleted: list[str] = []
        for uri in sorted(self._candidates - keep):
            if not uri.startswith(own):
                self._candidates.discard(uri)
                continue
            try:
                self._storage.fs.delete(uri)
            except StorageError as exc:
                log.warning("cannot delete the unreferenced shared file %s (tried again after "
                            "the next checkpoint): %s", uri, exc)
                continue
            self._candidates.discard(uri)
            self._deleted[uri] = checkpoint_id
            deleted.append(uri)
        # Still referenced: they become candidates again when those checkpoints go.
        self._candidates -= keep
        return deleted
