"""The state file of one ``rocksdb`` snapshot, and moving files to and from storage.

A RocksDB snapshot is a directory: immutable table files (``*.sst``), which go
to the job's shared directory once and are then referenced by every later
checkpoint that still uses them, and a few small files (``MANIFEST-*``,
``CURRENT``, ``OPTIONS-*``) that describe which tables make up the database at
that moment. The small files and the list of shared files travel together as
the subtask's state file ``chk-<id>/<operator>/<subtask>``, in this layout::

    b"cjob-rocksdb\\n" | header length (4 bytes, big-endian) | JSON header | bodies

The JSON header is versioned and names the key groups, each private file with
its size (the bodies follow in that order) and each shared file with its URI,
size and CRC-32. JSON rather than pickle: a restore must not run code from a
file someone else may have written.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib
from pathlib import Path

from cjob_checkpoint.checkpoint_storage import StateHandle
from cjob_checkpoint.fields import Json, JsonFields
from cjob_checkpoint.metadata import SharedStateFile
from cjob_checkpoint.storage.errors import CorruptDataError
from cjob_checkpoint.storage.file_system import FileSystem

MAGIC = b"cjob-rocksdb\n"
FORMAT_VERSION = 1
_CHUNK = 1024 * 1024


class RocksDBStateError(ValueError):
    """A ``rocksdb`` state file this runtime cannot read; the message says why."""


class _Fields(JsonFields):
    error = RocksDBStateError


@dataclasses.dataclass(frozen=True, kw_only=True)
class RocksDBStateFile:
    """The private files of one snapshot and the shared files it references."""

    key_groups: tuple[int, int]
    private: dict[str, bytes]
    shared: tuple[SharedStateFile, ...]

    def to_bytes(self) -> bytes:
        names = sorted(self.private)
        header: dict[str, Json] = {
            "version": FORMAT_VERSION,
            "keyGroups": list(self.key_groups),
            "private": [{"name": n, "size": len(self.private[n])} for n in names],
            "shared": [f.to_json() for f in self.shared],
        }
        encoded = json.dumps(header, separators=(",", ":")).encode()
        return b"".join([MAGIC, struct.pack(">I", len(encoded)), encoded,
                         *(self.private[n] for n in names)])

    @classmethod
    def from_bytes(cls, data: bytes) -> RocksDBStateFile:
        if not data.startswith(MAGIC):
            raise RocksDBStateError("not a rocksdb state file (was the job's state backend "
                                    "changed? a checkpoint restores with the backend that "
                                    "wrote it)")
        start = len(MAGIC) + 4
        if len(data) < start:
            raise RocksDBStateError("the rocksdb state file is truncated")
        (length,) = struct.unpack(">I", data[len(MAGIC):start])
        try:
            header = json.loads(data[start:start + length])
        except ValueError as exc:
            raise RocksDBStateError(f"the rocksdb state file's header is damaged: {exc}") from None
        fields = _Fields(header, where="a rocksdb state file")
        version = fields.value("version")
        if version != FORMAT_VERSION or isinstance(version, bool):
            raise RocksDBStateError(f"rocksdb state file version {version!r} is not supported "
                                    f"(this runtime reads version {FORMAT_VERSION})")
        groups = fields.array("keyGroups")
        if len(groups) != 2 or not all(isinstance(g, int) for g in groups):
            raise RocksDBStateError("'keyGroups' of a rocksdb state file must be two integers")
        private: dict[str, bytes] = {}
        offset = start + length
        for item in fields.array("private"):
            entry = fields.child(item, where="a private file of a rocksdb state file")
            size = entry.integer("size")
            body = data[offset:offset + size]
            if len(body) != size:
                raise RocksDBStateError("the rocksdb state file is truncated")
            private[_plain_name(entry.text("name"))] = body
            offset += size
        shared = []
        for item in fields.array("shared"):
            entry = fields.child(item, where="a shared file of a rocksdb state file")
            handle = StateHandle(uri=entry.text("uri"), size_bytes=entry.integer("sizeBytes"),
                                 crc32=entry.integer("crc32"))
            shared.append(SharedStateFile(name=_plain_name(entry.text("name")), handle=handle))
        return cls(key_groups=(groups[0], groups[1]), private=private, shared=tuple(shared))


def with_shared_files(data: bytes, shared: tuple[SharedStateFile, ...]) -> bytes:
    """``data`` whose shared files are where ``shared`` (the checkpoint's metadata, by
    file name) says they are. The metadata is the authority: a snapshot copies a
    checkpoint's files elsewhere and rewrites the metadata, never the state files it
    copies whole. ``data`` unchanged when it already agrees, or is not a rocksdb file."""
    if not shared or not is_rocksdb_state(data):
        return data
    state = RocksDBStateFile.from_bytes(data)
    where = {f.name: f for f in shared}
    moved = tuple(where.get(f.name, f) for f in state.shared)
    if moved == state.shared:
        return data
    return dataclasses.replace(state, shared=moved).to_bytes()


def is_rocksdb_state(data: bytes) -> bool:
    """Whether ``data`` is a ``rocksdb`` state file (else another backend's snapshot)."""
    return data.startswith(MAGIC)


def _plain_name(name: str) -> str:
    """A file name that stays inside the directory it is written to."""
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise RocksDBStateError(f"a rocksdb state file names the file {name!r}, which is not "
                                f"a plain file name")
    return name


def upload_file(fs: FileSystem, *, uri: str, path: Path) -> StateHandle:
    """Stream the local file ``path`` to ``uri``; the handle carries size and CRC-32."""
    size = 0
    crc = 0
    with path.open("rb") as source, fs.open_write(uri) as target:
        while chunk := source.read(_CHUNK):
            target.write(chunk)
            size += len(chunk)
            crc = zlib.crc32(chunk, crc)
    return StateHandle(uri=uri, size_bytes=size, crc32=crc)


def download_file(fs: FileSystem, *, handle: StateHandle, path: Path) -> None:
    """Stream ``handle`` to the local ``path``, checking its size and CRC-32."""
    size = 0
    crc = 0
    with fs.open_read(handle.uri) as source, path.open("wb") as target:
        while chunk := source.read(_CHUNK):
            target.write(chunk)
            size += len(chunk)
            crc = zlib.crc32(chunk, crc)
    if size != handle.size_bytes:
        raise CorruptDataError(uri=handle.uri, operation="read",
                               cause=f"expected {handle.size_bytes} bytes, found {size}")
    if crc != handle.crc32:
        raise CorruptDataError(uri=handle.uri, operation="read",
                               cause="the CRC-32 does not match (the file is damaged)")
