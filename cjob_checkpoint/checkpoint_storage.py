"""Where checkpoint data lives, and in which layout.

Layout (as in Flink's file-based checkpoint storage)::

    <root>/<job_id>/chk-<id>/<operator>/<subtask>   one file per state handle
    <root>/<job_id>/chk-<id>/_metadata              written last

``job_id`` is ``<job-name>-<uid>``: the uid keeps a recreated job with the same
name from restoring (or deleting) its predecessor's checkpoints. A checkpoint
exists only once its ``_metadata`` is durable; the completed-checkpoint store
records the ``_metadata`` URI as the pointer, so a crash during a checkpoint
leaves a directory without ``_metadata`` that nothing points to.

The content of ``_metadata`` belongs to the coordinator. This module frames it
with a one-line header holding its length and SHA-256, so a truncated or
damaged file is reported as unreadable instead of failing somewhere inside a
deserializer. State files carry a CRC-32 in their :class:`StateHandle`, which
the coordinator keeps in ``_metadata`` and :meth:`CheckpointStorage.read_state`
checks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
import zlib
from collections.abc import Iterable
from typing import Any

from cjob_checkpoint.storage.errors import (
    CorruptDataError,
    InvalidCheckpointPathError,
    StorageNotFoundError,
)
from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.file_system import FileSystem, join_uri
from cjob_checkpoint.storage.s3 import S3Config, S3FileSystem, is_s3_uri
from cjob_checkpoint.store.completed_store import CompletedCheckpoint, UnreadableCheckpointError

_log = logging.getLogger(__name__)

METADATA_NAME = "_metadata"
SHARED_DIR = "shared"
"""``<root>/<job_id>/shared/``: files incremental snapshots share across checkpoints."""
CHECKPOINT_DIR_PREFIX = "chk-"
_HEADER_PREFIX = b"cjob-metadata/1 "
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_CHK_SEGMENT = re.compile(r"^chk-(\d{1,19})$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StateHandle:
    """Where one subtask's state for one operator was written, and how to check it."""

    uri: str
    size_bytes: int
    crc32: int

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "sizeBytes": self.size_bytes, "crc32": self.crc32}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StateHandle:
        return cls(uri=str(data["uri"]), size_bytes=int(data["sizeBytes"]),
                   crc32=int(data["crc32"]))


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointLocation:
    """The parts of a checkpoint path: ``<root>/<job_id>/chk-<checkpoint_id>``."""

    root: str
    job_id: str
    checkpoint_id: int

    @property
    def checkpoint_dir(self) -> str:
        return join_uri(self.root, self.job_id, f"{CHECKPOINT_DIR_PREFIX}{self.checkpoint_id}")

    @property
    def metadata_uri(self) -> str:
        return join_uri(self.checkpoint_dir, METADATA_NAME)


def parse_checkpoint_uri(uri: str) -> CheckpointLocation:
    """Split a ``.../<job_id>/chk-<id>/_metadata`` URI (or the ``chk-<id>`` directory).

    Raises :class:`InvalidCheckpointPathError` when ``uri`` does not follow the
    layout, e.g. a path to some other file or a directory above the checkpoint.
    """
    trimmed = uri.rstrip("/")
    if trimmed.endswith("/" + METADATA_NAME):
        trimmed = trimmed[: -len(METADATA_NAME) - 1]
    head, _, chk = trimmed.rpartition("/")
    match = _CHK_SEGMENT.match(chk)
    if not match:
        raise InvalidCheckpointPathError(
            uri=uri, operation="use",
            cause="not a checkpoint path: expected <root>/<job-id>/chk-<id>/_metadata",
        )
    root, _, job_id = head.rpartition("/")
    if not _SEGMENT.match(job_id) or not root or root.endswith(":") or root.endswith(":/"):
        raise InvalidCheckpointPathError(
            uri=uri, operation="use",
            cause="not a checkpoint path: expected <root>/<job-id>/chk-<id>/_metadata",
        )
    return CheckpointLocation(root=root, job_id=job_id, checkpoint_id=int(match.group(1)))


parse_metadata_uri = parse_checkpoint_uri


def ensure_safe_segment(name: str, *, what: str) -> str:
    """Return ``name`` if it is usable as one path segment, else raise."""
    if not _SEGMENT.match(name):
        raise InvalidCheckpointPathError(
            uri=name, operation="use",
            cause=f"{what} must be 1-200 characters of letters, digits, '.', '_' or '-', "
                  "starting with a letter or digit",
        )
    return name


def frame_metadata(data: bytes) -> bytes:
    """Prefix ``data`` with the header that lets a reader detect damage."""
    digest = hashlib.sha256(data).hexdigest()
    return _HEADER_PREFIX + f"length={len(data)} sha256={digest}\n".encode() + data


def unframe_metadata(framed: bytes) -> bytes:
    """Check and strip the header; raise :class:`ValueError` naming what is wrong."""
    if not framed:
        raise ValueError("the _metadata file is empty")
    if not framed.startswith(_HEADER_PREFIX):
        raise ValueError("the _metadata file has no cjob-metadata header (not written by cjob)")
    newline = framed.find(b"\n")
    if newline < 0:
        raise ValueError("the _metadata header is truncated")
    fields: dict[str, str] = {}
    for item in framed[len(_HEADER_PREFIX):newline].decode("ascii", "replace").split():
        key, _, value = item.partition("=")
        fields[key] = value
    payload = framed[newline + 1:]
    try:
        length = int(fields["length"])
        digest = fields["sha256"]
    except (KeyError, ValueError):
        raise ValueError("the _metadata header is malformed") from None
    if len(payload) != length:
        raise ValueError(f"the _metadata file is truncated ({len(payload)} of {length} bytes)")
    if hashlib.sha256(payload).hexdigest() != digest:
        raise ValueError("the _metadata checksum does not match (the file is damaged)")
    return payload


class CheckpointStorage:
    """The checkpoint directory of one job on one file system.

    Cheap to construct and picklable (the file system drops its client when
    pickled), so subtasks on executors can hold one to write their state.
    """

    def __init__(self, root_uri: str, job_id: str, *, fs: FileSystem | None = None) -> None:
        if not root_uri:
            raise InvalidCheckpointPathError(uri=root_uri, operation="use",
                                             cause="the checkpoint root is empty")
        self.root_uri = root_uri.rstrip("/") or root_uri
        self.job_id = ensure_safe_segment(job_id, what="the job id")
        self.fs = fs if fs is not None else get_filesystem(root_uri)

    def __repr__(self) -> str:
        return f"CheckpointStorage({self.root_uri!r}, {self.job_id!r})"

    # ------------------------------------------------------------------ layout

    @property
    def job_dir(self) -> str:
        """``<root>/<job_id>``: every checkpoint of this job lives below it."""
        return join_uri(self.root_uri, self.job_id)

    def checkpoint_dir(self, checkpoint_id: int) -> str:
        return join_uri(self.job_dir, f"{CHECKPOINT_DIR_PREFIX}{_checked_id(checkpoint_id)}")

    def metadata_uri(self, checkpoint_id: int) -> str:
        return join_uri(self.checkpoint_dir(checkpoint_id), METADATA_NAME)

    @property
    def shared_dir(self) -> str:
        return join_uri(self.job_dir, SHARED_DIR)

    def shared_uri(self, name: str) -> str:
        """Where a shared file named ``name`` (unique per upload) lives."""
        return join_uri(self.shared_dir, ensure_safe_segment(name, what="a shared file name"))

    def state_uri(self, checkpoint_id: int, operator: str, subtask: int) -> str:
        ensure_safe_segment(operator, what="the operator name")
        if isinstance(subtask, bool) or not isinstance(subtask, int) or subtask < 0:
            raise InvalidCheckpointPathError(
                uri=str(subtask), operation="use", cause="the subtask index must be an int >= 0"
            )
        return join_uri(self.checkpoint_dir(checkpoint_id), operator, str(subtask))

    # ------------------------------------------------------------------ state

    def write_state(
        self, checkpoint_id: int, operator: str, subtask: int, data: bytes
    ) -> StateHandle:
        """Write one subtask's state for one operator; returns the handle to record."""
        uri = self.state_uri(checkpoint_id, operator, subtask)
        self.fs.write_bytes(uri, data)
        return StateHandle(uri=uri, size_bytes=len(data), crc32=zlib.crc32(data))

    def write_state_chunks(
        self, checkpoint_id: int, operator: str, subtask: int, chunks: Iterable[bytes]
    ) -> StateHandle:
        """Like :meth:`write_state`, streaming ``chunks`` so large state never has
        to sit in memory as one buffer (on S3 it goes up in multipart parts)."""
        uri = self.state_uri(checkpoint_id, operator, subtask)
        size = 0
        crc = 0
        with self.fs.open_write(uri) as handle:
            for chunk in chunks:
                handle.write(chunk)
                size += len(chunk)
                crc = zlib.crc32(chunk, crc)
        return StateHandle(uri=uri, size_bytes=size, crc32=crc)

    def read_state(self, handle: StateHandle) -> bytes:
        """Read the state behind ``handle``, checking its size and CRC-32."""
        data = self.fs.read_bytes(handle.uri)
        if len(data) != handle.size_bytes:
            raise CorruptDataError(
                uri=handle.uri, operation="read",
                cause=f"expected {handle.size_bytes} bytes, found {len(data)}",
            )
        if zlib.crc32(data) != handle.crc32:
            raise CorruptDataError(uri=handle.uri, operation="read",
                                   cause="the CRC-32 does not match (the file is damaged)")
        return data

    # ------------------------------------------------------------------ metadata

    def write_metadata(self, checkpoint_id: int, data: bytes) -> str:
        """Write ``_metadata`` (call this after every state file is written).

        Returns the ``_metadata`` URI: the pointer the store records.
        """
        uri = self.metadata_uri(checkpoint_id)
        self.fs.write_bytes(uri, frame_metadata(data))
        return uri

    def read_metadata(self, uri: str) -> bytes:
        """Read and check the ``_metadata`` at ``uri`` (or below a ``chk-<id>`` dir).

        Raises :class:`UnreadableCheckpointError` when the file is missing,
        empty, damaged or ``uri`` is not a checkpoint path. Storage outages
        (:class:`~cjob_checkpoint.storage.errors.StorageUnavailableError`) and denied
        access propagate unchanged: they say nothing about the checkpoint, and
        falling back to an older one would not help.
        """
        try:
            location = parse_checkpoint_uri(uri)
        except InvalidCheckpointPathError as exc:
            raise UnreadableCheckpointError(checkpoint_id=-1, path=uri, cause=exc.cause) from None
        metadata_uri = _metadata_uri_of(uri)
        fs = self._fs_for(metadata_uri)
        try:
            framed = fs.read_bytes(metadata_uri)
        except StorageNotFoundError:
            raise UnreadableCheckpointError(
                checkpoint_id=location.checkpoint_id, path=metadata_uri,
                cause="the _metadata file does not exist (deleted, or never completed)",
            ) from None
        try:
            return unframe_metadata(framed)
        except ValueError as exc:
            raise UnreadableCheckpointError(
                checkpoint_id=location.checkpoint_id, path=metadata_uri, cause=str(exc)
            ) from None

    def verify_metadata_readable(self, uri: str) -> None:
        """Raise :class:`UnreadableCheckpointError` unless ``uri``'s ``_metadata`` reads."""
        self.read_metadata(uri)

    # ------------------------------------------------------------------ ownership

    def is_own_checkpoint(self, uri: str) -> bool:
        """Whether ``uri`` is a checkpoint path of this job.

        Only the job id (``<name>-<uid>``) is compared, not the root: a job whose
        storage root moved may still restore the checkpoints it wrote before.
        Another job's path, or a path outside the layout, gives ``False``.
        """
        try:
            return parse_checkpoint_uri(uri).job_id == self.job_id
        except InvalidCheckpointPathError:
            return False

    # ------------------------------------------------------------------ cleanup

    def discard(self, checkpoint: CompletedCheckpoint) -> None:
        """Delete a completed checkpoint's ``chk-<id>`` directory (the store's callback).

        ``_metadata`` goes first, so a half-deleted checkpoint never looks
        complete. Another job's checkpoint is never deleted (logged and skipped).
        Raises :class:`~cjob_checkpoint.storage.errors.StorageError` when deletion
        fails, so the store keeps the entry marked and retries later.
        """
        location = parse_checkpoint_uri(checkpoint.metadata_path)
        if location.job_id != self.job_id:
            _log.warning(
                "not deleting checkpoint %d at %s: it belongs to job %s, not %s",
                checkpoint.checkpoint_id, checkpoint.metadata_path, location.job_id, self.job_id,
            )
            return
        if location.checkpoint_id != checkpoint.checkpoint_id:
            raise InvalidCheckpointPathError(
                uri=checkpoint.metadata_path, operation="discard",
                cause=f"the pointer says checkpoint {checkpoint.checkpoint_id} but the path "
                      f"is chk-{location.checkpoint_id}; refusing to delete",
            )
        fs = self._fs_for(location.checkpoint_dir)
        fs.delete(location.metadata_uri)
        fs.delete_prefix(location.checkpoint_dir)

    def discard_pending(self, checkpoint_id: int) -> None:
        """Delete the partial data of a checkpoint that never completed."""
        self.fs.delete_prefix(self.checkpoint_dir(checkpoint_id))

    def list_completed_ids(self) -> list[int]:
        """Ids of this job's checkpoints whose ``_metadata`` exists, ascending.

        A scan of the storage, independent of the store; useful to find orphans.
        """
        ids: set[int] = set()
        for uri in self.fs.list(self.job_dir):
            if not uri.endswith("/" + METADATA_NAME):
                continue
            try:
                location = parse_checkpoint_uri(uri)
            except InvalidCheckpointPathError:
                continue
            if location.job_id == self.job_id:
                ids.add(location.checkpoint_id)
        return sorted(ids)

    def _fs_for(self, uri: str) -> FileSystem:
        """Our file system, unless ``uri`` lives on another kind (the root moved)."""
        if is_s3_uri(uri) != isinstance(self.fs, S3FileSystem):
            return get_filesystem(uri)
        return self.fs


def verify_metadata_readable(
    uri: str, *, fs: FileSystem | None = None, s3: S3Config | None = None
) -> None:
    """Raise :class:`UnreadableCheckpointError` unless the ``_metadata`` at ``uri`` reads."""
    read_metadata(uri, fs=fs, s3=s3)


def read_metadata(uri: str, *, fs: FileSystem | None = None, s3: S3Config | None = None) -> bytes:
    """Read a checkpoint's ``_metadata`` knowing only its URI (e.g. ``--restore``)."""
    try:
        location = parse_checkpoint_uri(uri)
    except InvalidCheckpointPathError as exc:
        raise UnreadableCheckpointError(checkpoint_id=-1, path=uri, cause=exc.cause) from None
    filesystem = fs if fs is not None else get_filesystem(uri, s3=s3)
    storage = CheckpointStorage(location.root, location.job_id, fs=filesystem)
    return storage.read_metadata(uri)


def _metadata_uri_of(uri: str) -> str:
    trimmed = uri.rstrip("/")
    if trimmed.endswith("/" + METADATA_NAME):
        return trimmed
    return join_uri(trimmed, METADATA_NAME)


def _checked_id(checkpoint_id: int) -> int:
    if isinstance(checkpoint_id, bool) or not isinstance(checkpoint_id, int) or checkpoint_id < 0:
        raise InvalidCheckpointPathError(
            uri=str(checkpoint_id), operation="use", cause="a checkpoint id must be an int >= 0"
        )
    return checkpoint_id
