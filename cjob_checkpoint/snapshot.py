"""Snapshots: a completed checkpoint copied into a directory of its own, self-contained.

A checkpoint is pruned once ``retained`` newer ones exist, and deleted with its job;
an incremental (``rocksdb``) one also references table files in the job's shared
directory that later prunes delete. A snapshot is what survives both: every file the
checkpoint's state reads (state files, shared files, in-flight channel data) copied
below ``<target>/<job>/chk-<id>/`` and a ``_metadata`` that names the copies, written
last, so a snapshot is either whole or has no ``_metadata``.

The copy keeps the checkpoint layout (``<root>/<job>/chk-<id>/_metadata``), so every
restore path reads it as it reads a checkpoint; its ``_metadata`` says it is a
snapshot (``SnapshotOrigin``), which a restore takes as the user's explicit choice.
A job restored from a snapshot never writes into it and never reuses its files: a
``rocksdb`` state reuses only files of its own shared directory, so its first
checkpoint uploads what it needs, and the snapshot may be deleted any time after.

Sink transactions the checkpoint lists as pending are kept as they are, not copied:
a snapshot is taken of a checkpoint whose completion the sinks already committed (a
restore commits them again, idempotently, and never needs their staging files).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
import zlib

from cjob_checkpoint.checkpoint_storage import (
    SHARED_DIR,
    CheckpointStorage,
    StateHandle,
    parse_checkpoint_uri,
)
from cjob_checkpoint.metadata import (
    ChannelStateHandle,
    CheckpointMetadata,
    KeyedStateHandle,
    SharedStateFile,
    SnapshotOrigin,
)
from cjob_checkpoint.storage.errors import CorruptDataError
from cjob_checkpoint.storage.file_system import FileSystem, join_uri

CHUNK_BYTES = 8 << 20
FOREIGN_DIR = "imported"
"""Where a snapshot keeps files the checkpoint read from outside its job's directory
(the shared files of another job it was restored from)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Snapshot:
    """A snapshot that was written: its ``_metadata`` and what it holds."""

    metadata_uri: str
    metadata: CheckpointMetadata
    files: int
    size_bytes: int


def snapshot_checkpoint(*, checkpoint: str, target: str, name: str,
                        source_fs: FileSystem, target_fs: FileSystem,
                        clock: float | None = None) -> Snapshot:
    """Copy the completed checkpoint whose ``_metadata`` is ``checkpoint`` into
    ``target`` (``<target>/<job>/chk-<id>/``), checking every file's size and CRC-32
    on the way; the snapshot's ``_metadata`` is written last.

    Raises what reading the checkpoint raises (``UnreadableCheckpointError``,
    ``MetadataError``) and :class:`CorruptDataError` for a damaged state file.
    """
    location = parse_checkpoint_uri(checkpoint)
    source = CheckpointStorage(location.root, location.job_id, fs=source_fs)
    metadata = CheckpointMetadata.from_bytes(source.read_metadata(checkpoint))
    copy = CheckpointStorage(target, location.job_id, fs=target_fs)
    mover = _Mover(source_job_dir=source.job_dir, target=copy, source_fs=source_fs,
                   target_fs=target_fs, checkpoint_id=metadata.checkpoint_id)
    operators = {uid: tuple(_keyed(handle, mover) for handle in handles)
                 for uid, handles in metadata.operators.items()}
    channels = {stage: tuple(ChannelStateHandle(subtask=h.subtask, handle=mover.copy(h.handle))
                             for h in handles)
                for stage, handles in metadata.channels.items()}
    copied = dataclasses.replace(
        metadata, operators=operators, channels=channels,
        snapshot=SnapshotOrigin(name=name, source=checkpoint,
                                taken_at=time.time() if clock is None else clock))
    body = copied.to_bytes()
    uri = copy.write_metadata(metadata.checkpoint_id, body)
    return Snapshot(metadata_uri=uri, metadata=copied, files=mover.files + 1,
                    size_bytes=mover.size_bytes + len(body))


def _keyed(handle: KeyedStateHandle, mover: _Mover) -> KeyedStateHandle:
    return dataclasses.replace(
        handle, handle=mover.copy(handle.handle),
        shared=tuple(SharedStateFile(name=f.name, handle=mover.copy(f.handle))
                     for f in handle.shared))


class _Mover:
    """Copies state files into the snapshot, each once, keeping their place below the
    job's directory (``chk-<id>/<operator>/<subtask>``, ``shared/<name>``)."""

    def __init__(self, *, source_job_dir: str, target: CheckpointStorage,
                 source_fs: FileSystem, target_fs: FileSystem, checkpoint_id: int) -> None:
        self._prefix = source_job_dir.rstrip("/") + "/"
        self._target = target
        self._source_fs = source_fs
        self._target_fs = target_fs
        self._checkpoint_id = checkpoint_id
        self._done: dict[str, StateHandle] = {}
        self.files = 0
        self.size_bytes = 0

    def _place(self, uri: str) -> str:
        if uri.startswith(self._prefix):
            return join_uri(self._target.job_dir, uri[len(self._prefix):])
        # Read from another job's directory (restored from it): kept apart, by a name
        # derived from where it was, so two such files never meet.
        tail = uri.rstrip("/").rpartition("/")[2]
        digest = hashlib.sha256(uri.encode()).hexdigest()[:16]
        return join_uri(self._target.job_dir, SHARED_DIR, FOREIGN_DIR, f"{digest}-{tail}")

    def copy(self, handle: StateHandle) -> StateHandle:
        done = self._done.get(handle.uri)
        if done is not None:
            return done
        destination = self._place(handle.uri)
        size = 0
        crc = 0
        with self._source_fs.open_read(handle.uri) as reader, \
                self._target_fs.open_write(destination) as writer:
            while chunk := reader.read(CHUNK_BYTES):
                writer.write(chunk)
                size += len(chunk)
                crc = zlib.crc32(chunk, crc)
            if size != handle.size_bytes or crc != handle.crc32:
                raise CorruptDataError(
                    uri=handle.uri, operation="snapshot",
                    cause=f"expected {handle.size_bytes} bytes with CRC-32 {handle.crc32}, "
                          f"found {size} bytes with CRC-32 {crc}")
        copied = StateHandle(uri=destination, size_bytes=size, crc32=crc)
        self._done[handle.uri] = copied
        self.files += 1
        self.size_bytes += size
        return copied
