"""Files on a local or mounted disk, written atomically: temporary file, fsync, rename.

The same atomic write serves the small files of the file-backed checkpoint store,
the manual trigger file and the driver's status file.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import BinaryIO, cast
from urllib.parse import urlsplit

from cjob_checkpoint.storage.errors import (
    StorageAccessDeniedError,
    StorageError,
    StorageNotFoundError,
    StorageUnavailableError,
    UnsupportedUriError,
)
from cjob_checkpoint.storage.file_system import FileSystem, join_uri

_log = logging.getLogger(__name__)


class LocalFileSystem(FileSystem):
    """Files on a local or mounted disk.

    Accepts ``file:///abs/path`` (also ``file:/abs/path`` and
    ``file://localhost/abs/path``), absolute paths and relative paths (relative to
    the current directory). Percent escapes in ``file://`` URIs are not decoded:
    the path is taken literally.
    """

    def write_bytes(self, uri: str, data: bytes) -> None:
        path = local_path(uri)
        try:
            write_file_atomically(path, data)
        except OSError as exc:
            raise _map_os_error(exc, uri=uri, operation="write") from None

    def read_bytes(self, uri: str) -> bytes:
        path = local_path(uri)
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except OSError as exc:
            raise _map_os_error(exc, uri=uri, operation="read") from None

    def open_read(self, uri: str) -> BinaryIO:
        path = local_path(uri)
        try:
            return open(path, "rb")
        except OSError as exc:
            raise _map_os_error(exc, uri=uri, operation="open") from None

    def open_write(self, uri: str) -> AbstractContextManager[BinaryIO]:
        return self._open_write(uri)

    @contextlib.contextmanager
    def _open_write(self, uri: str) -> Iterator[BinaryIO]:
        path = local_path(uri)
        try:
            directory = os.path.dirname(os.path.abspath(path))
            os.makedirs(directory, exist_ok=True)
            tmp_path = _temp_name(path)
            handle = open(tmp_path, "xb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise _map_os_error(exc, uri=uri, operation="write") from None
        try:
            yield cast(BinaryIO, handle)
        except BaseException:
            handle.close()
            _remove_quietly(tmp_path)
            raise
        try:
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
            os.replace(tmp_path, path)
            _fsync_directory(directory)
        except OSError as exc:
            handle.close()
            _remove_quietly(tmp_path)
            raise _map_os_error(exc, uri=uri, operation="write") from None

    def exists(self, uri: str) -> bool:
        return os.path.exists(local_path(uri))

    def size(self, uri: str) -> int:
        try:
            return os.stat(local_path(uri)).st_size
        except OSError as exc:
            raise _map_os_error(exc, uri=uri, operation="stat") from None

    def delete(self, uri: str) -> None:
        path = local_path(uri)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _map_os_error(exc, uri=uri, operation="delete") from None

    def delete_prefix(self, uri: str) -> None:
        path = local_path(uri)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _map_os_error(exc, uri=uri, operation="delete") from None

    def list(self, prefix_uri: str) -> list[str]:
        path = local_path(prefix_uri)
        if os.path.isfile(path):
            return [prefix_uri]
        found: list[str] = []

        def _raise(exc: OSError) -> None:
            raise exc

        try:
            for directory, _dirs, files in os.walk(path, onerror=_raise):
                relative = os.path.relpath(directory, path)
                for name in files:
                    parts = [name] if relative == "." else [*relative.split(os.sep), name]
                    found.append(join_uri(prefix_uri, *parts))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise _map_os_error(exc, uri=prefix_uri, operation="list") from None
        return sorted(found)

    def rename(self, src: str, dst: str) -> None:
        src_path = local_path(src)
        dst_path = local_path(dst)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(dst_path)), exist_ok=True)
            try:
                os.replace(src_path, dst_path)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                # Different devices: copy next to the destination, then swap in.
                tmp_path = _temp_name(dst_path)
                shutil.copyfile(src_path, tmp_path)
                os.replace(tmp_path, dst_path)
                os.unlink(src_path)
            _fsync_directory(os.path.dirname(os.path.abspath(dst_path)))
        except OSError as exc:
            raise _map_os_error(exc, uri=src, operation=f"rename to {dst}") from None


def local_path(uri: str) -> str:
    """The OS path behind a ``file://`` URI or a plain path."""
    if uri.startswith("file:"):
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise UnsupportedUriError(
                uri=uri, operation="use",
                cause=f"file URIs must not name a host ({parts.netloc!r}); use file:///abs/path",
            )
        if not parts.path:
            raise UnsupportedUriError(uri=uri, operation="use", cause="the file URI has no path")
        return parts.path
    if "://" in uri:
        raise UnsupportedUriError(
            uri=uri, operation="use", cause="not a local path or file:// URI"
        )
    if not uri:
        raise UnsupportedUriError(uri=uri, operation="use", cause="the path is empty")
    return uri


def _temp_name(path: str) -> str:
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.tmp-{secrets.token_hex(6)}")


def write_file_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to the local ``path`` so that readers see the old or the new
    content, never a mix: temp file in the same directory, fsync, rename, fsync
    the directory. Raises :class:`OSError`."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp_path = _temp_name(path)
    try:
        with open(tmp_path, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        _remove_quietly(tmp_path)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    """Make a rename durable; some file systems refuse to open directories."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _map_os_error(exc: OSError, *, uri: str, operation: str) -> StorageError:
    _log.debug("%s %s failed", operation, uri, exc_info=exc)
    cause = exc.strerror or str(exc)
    if isinstance(exc, FileNotFoundError):
        return StorageNotFoundError(uri=uri, operation=operation, cause="no such file or directory")
    if isinstance(exc, PermissionError):
        return StorageAccessDeniedError(uri=uri, operation=operation, cause="permission denied")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageError(uri=uri, operation=operation, cause="no space left on the device")
    if exc.errno in (errno.EIO, errno.ESTALE, errno.ETIMEDOUT, errno.EHOSTUNREACH):
        return StorageUnavailableError(uri=uri, operation=operation, cause=cause)
    return StorageError(uri=uri, operation=operation, cause=cause)
