"""The file-system interface for checkpoints, the files source and the files sink.

Two implementations exist: :class:`~cjob_checkpoint.storage.local.LocalFileSystem`
(``file://`` URIs and plain paths; the embedded default on a laptop or a PVC) and
:class:`~cjob_checkpoint.storage.s3.S3FileSystem` (``s3://bucket/key`` through boto3,
with an endpoint override for MinIO or any other S3 API);
:func:`~cjob_checkpoint.storage.factory.get_filesystem` picks one for a URI. The
interface is deliberately the lowest common denominator of the two: whole-object
writes, streaming reads, recursive listing and a rename that is atomic locally and
copy-then-delete on S3. Callers that need a rename to be idempotent check ``exists``
on the source and the destination themselves.

"Directories" exist only locally. On S3 ``list`` and ``delete_prefix`` treat the
given key as a directory (they look below ``key/``), so ``chk-1`` never matches
``chk-10``.

Writes through :meth:`FileSystem.write_bytes` and :meth:`FileSystem.open_write`
never expose a half-written file: locally the data goes to a hidden temporary
file in the same directory (``.<name>.tmp-<random>``), is fsynced, and is then
renamed; on S3 an object only appears when its upload completes. Listings may
still show such hidden temporary files while a write is in flight; consumers
skip names that start with ``.`` or ``_`` as Spark and Hadoop do.
"""

from __future__ import annotations

import abc
import builtins
from contextlib import AbstractContextManager
from typing import BinaryIO


class FileSystem(abc.ABC):
    """Whole-file operations on URIs; see the module docstring for the semantics."""

    def prepare(self) -> None:
        """Do now the one-time work of a first request that needs no network.

        A standby's parked subtasks call it before they register, so what a client
        costs to create is paid before the promotion, not inside the takeover.
        Nothing to do by default.
        """
        return None

    @abc.abstractmethod
    def write_bytes(self, uri: str, data: bytes) -> None:
        """Write ``data`` to ``uri`` atomically, creating parent directories."""

    @abc.abstractmethod
    def read_bytes(self, uri: str) -> bytes:
        """Return the whole content of ``uri``."""

    @abc.abstractmethod
    def open_read(self, uri: str) -> BinaryIO:
        """Open ``uri`` for buffered, seekable reading; the caller closes it."""

    @abc.abstractmethod
    def open_write(self, uri: str) -> AbstractContextManager[BinaryIO]:
        """A context manager yielding a writable file that appears at ``uri`` on
        successful exit; if the block raises, nothing is written."""

    @abc.abstractmethod
    def exists(self, uri: str) -> bool:
        """Whether a file or directory (on S3: an object or a non-empty prefix) exists."""

    @abc.abstractmethod
    def size(self, uri: str) -> int:
        """The size of the file or object in bytes."""

    @abc.abstractmethod
    def delete(self, uri: str) -> None:
        """Delete one file or object; a missing one is not an error."""

    @abc.abstractmethod
    def delete_prefix(self, uri: str) -> None:
        """Delete ``uri`` and everything below it; a missing one is not an error."""

    @abc.abstractmethod
    def list(self, prefix_uri: str) -> list[str]:
        """Every file or object below ``prefix_uri``, recursively, sorted.

        If ``prefix_uri`` names a single file or object, the list holds just it; a
        missing prefix gives an empty list. The URIs have the same form as
        ``prefix_uri`` (a plain path gives plain paths).
        """

    @abc.abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, replacing ``dst``.

        Atomic locally (``os.replace``); on S3 a copy followed by a delete, so a
        crash in between leaves both. Raises :class:`StorageNotFoundError` when
        ``src`` is missing; callers that retry check ``exists`` first.
        """

    def unfinished_uploads(self, prefix_uri: str) -> builtins.list[str]:
        """The objects below ``prefix_uri`` whose upload began and never completed.

        Only an object store has them: a multipart upload that its writer never
        completed nor aborted (the writer was killed) keeps its parts, billed and
        invisible to :meth:`list`, until it is aborted. A file system's partly
        written file is a file, which :meth:`list` shows.
        """
        return []

    def abort_uploads(self, prefix_uri: str) -> int:
        """Abort every unfinished upload below ``prefix_uri``; how many were aborted."""
        return 0

    def join(self, base: str, *parts: str) -> str:
        """Append path segments to ``base`` with single slashes."""
        return join_uri(base, *parts)



def join_uri(base: str, *parts: str) -> str:
    """Append path segments to ``base`` with single slashes, keeping its scheme."""
    result = base
    for part in parts:
        segment = part.strip("/")
        if not segment:
            continue
        result = result + segment if result.endswith("/") else result + "/" + segment
    return result
