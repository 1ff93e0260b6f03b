"""The job's code on the driver and on the executors (``spec.job.pythonPath``).

Entries are directories (or zip archives) on the driver's file system -- code baked
into the image, a mounted ConfigMap or volume -- and ``s3://bucket/key.zip`` archives.

The driver puts every entry on its own ``sys.path`` before it imports the job. The
subtasks import the job again, in the executors' Python workers (each subtask builds
the pipeline from the entrypoint, and cloudpickle refers to functions of importable
modules by name), so every entry must be importable there too:

* An S3 archive exists only where the driver downloaded it: the driver ships it to
  the executors with ``SparkContext.addPyFile``.
* A directory is visible to the executors only when they share the driver's files:
  with a ``local[...]`` master they are Python workers of the driver's own JVM, and
  each subtask puts the directory on its ``sys.path`` itself. Under any other master
  (Kubernetes, ``local-cluster``) executors are processes of their own, in pods of
  their own; a ConfigMap mounted into the driver pod never reaches them (Spark mounts
  only PVC, hostPath and NFS volumes into executors). The driver zips each such
  directory and ships the zip.

Shipped entries are left out of the subtasks' ``sys.path``: executors import exactly
what the driver imported, never an older copy that happens to sit at the same path
in the executor image.

A zip holds what Python imports from a ``sys.path`` entry: ``.py`` modules, at any
depth below directories whose names are identifiers (packages, namespace packages
included). ``__pycache__`` and dot-entries are skipped; the latter leaves out ``.git``
and the ``..data`` symlink farm of a ConfigMap mount, whose visible names are symlinks
into it and are zipped with their resolved contents. A zip's bytes depend only on the
names and contents of the files (sorted entries, fixed times and modes), so the same
code always gives the same zip.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import zipfile
from collections.abc import Iterator, Sequence
from typing import Any

from cjob_checkpoint.storage.errors import (
    StorageError,
    StorageNotFoundError,
    StorageUnavailableError,
)
from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.s3 import S3Config
from cjob_spec.model import is_s3_code
from job_runtime.errors import JobCodeError

log = logging.getLogger(__name__)

ZIP_TIME = (1980, 1, 1, 0, 0, 0)
"""The earliest time a zip entry can hold: every entry gets it, so zips are reproducible."""
FILE_MODE = 0o100644 << 16
DIRECTORY_MODE = (0o040755 << 16) | 0x10
ARCHIVE_PREFIX = "cjob-pythonpath"
"""Shipped archives are named ``cjob-pythonpath-<index>-<name>.zip``: Spark keys the
files it ships by name, so names must be unique within the job."""
MAX_ARCHIVE_BYTES = 512 * 1024 * 1024
"""The largest ``s3://`` code archive a driver downloads: job code and its pure-Python
dependencies fit many times over; an object beyond it is refused, not read."""
_COPY_CHUNK = 8 * 1024 * 1024

_LOCAL_MASTER = re.compile(r"^local\[")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CodeEntry:
    """One ``pythonPath`` entry, resolved on the driver."""

    source: str
    """The entry as the job gives it."""
    local_path: str
    """Where the driver imports it from: the directory, or the (downloaded) archive."""
    shipped: str | None = None
    """The archive the driver ships to the executors; ``None`` when they see
    ``local_path`` themselves (or must provide it themselves)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobCodePaths:
    """The job's ``pythonPath`` as the driver and the executors see it."""

    entries: tuple[CodeEntry, ...] = ()

    @property
    def driver_path(self) -> tuple[str, ...]:
        return tuple(entry.local_path for entry in self.entries)

    @property
    def executor_path(self) -> tuple[str, ...]:
        """What each subtask adds to ``sys.path`` itself: the entries not shipped.

        They go in front of the shipped archives there. Only a path that is not on
        the driver (code baked into the executors' image) is unshipped under a
        cluster master, so the order differs from the driver's only for such a path.
        """
        return tuple(entry.local_path for entry in self.entries if entry.shipped is None)

    @property
    def archives(self) -> tuple[str, ...]:
        """The archives to ship, in ``pythonPath`` order."""
        return tuple(entry.shipped for entry in self.entries if entry.shipped is not None)


def executors_share_driver_files(master: str) -> bool:
    """Whether the executors' Python workers run next to the driver, on its files.

    True only for ``local[...]``: ``local-cluster[...]`` starts executor processes of
    their own, as a cluster does.
    """
    return bool(_LOCAL_MASTER.match(master))


def prepare_job_code(
    python_path: Sequence[str], *, master: str, s3: S3Config | None, work_dir: str
) -> JobCodePaths:
    """Resolve ``python_path`` on the driver: download S3 archives into ``work_dir``
    and zip the directories the executors cannot see (see the module docstring).

    Raises :class:`JobCodeError` for an archive that is missing, forbidden or not a
    readable zip (the job cannot run; restarting does not help) and lets
    :class:`StorageUnavailableError` through (S3 unreachable: a restart may help).
    """
    ship_local = not executors_share_driver_files(master)
    entries: list[CodeEntry] = []
    for index, source in enumerate(python_path):
        if is_s3_code(source):
            archive = os.path.join(work_dir, archive_name(index, source))
            fetch_archive(source, destination=archive, s3=s3)
            entries.append(CodeEntry(source=source, local_path=archive, shipped=archive))
            continue
        path = os.path.abspath(source)
        if not ship_local:
            entries.append(CodeEntry(source=source, local_path=path))
        elif os.path.isdir(path):
            entries.append(_package_for_executors(index=index, source=source, path=path,
                                                  work_dir=work_dir))
        elif os.path.isfile(path):
            archive = os.path.join(work_dir, archive_name(index, path))
            try:
                shutil.copyfile(path, archive)
            except OSError as exc:
                raise JobCodeError(source=source, problem=f"cannot be read: "
                                                          f"{exc.strerror or exc}") from None
            check_archive(archive, source=source)
            entries.append(CodeEntry(source=source, local_path=path, shipped=archive))
        else:
            log.warning("pythonPath entry %s does not exist on the driver; the executors "
                        "must provide it themselves", source)
            entries.append(CodeEntry(source=source, local_path=path))
    return JobCodePaths(entries=tuple(entries))


def _package_for_executors(*, index: int, source: str, path: str, work_dir: str) -> CodeEntry:
    archive = os.path.join(work_dir, archive_name(index, path))
    count = package_directory(path, archive=archive)
    if count == 0:
        log.warning("pythonPath entry %s holds no Python modules; nothing is shipped for it",
                    source)
        return CodeEntry(source=source, local_path=path)
    log.info("shipping %d modules of %s to the executors as %s", count, source,
             os.path.basename(archive))
    return CodeEntry(source=source, local_path=path, shipped=archive)


def ship_job_code(spark_context: Any, code: JobCodePaths) -> None:
    """Ship the archives to the executors before any stage runs.

    Spark puts each shipped archive on the workers' ``sys.path`` right after their
    own directory, the last one added first: adding them in reverse keeps the first
    ``pythonPath`` entry first, as on the driver.
    """
    for archive in reversed(code.archives):
        spark_context.addPyFile(archive)


def archive_name(index: int, source: str) -> str:
    """``cjob-pythonpath-<index>-<name>.zip`` for the entry at ``index``."""
    base = os.path.basename(source.rstrip("/")) or "root"
    stem = base[:-4] if base.lower().endswith(".zip") else base
    stem = _UNSAFE_NAME.sub("_", stem).strip("._") or "code"
    return f"{ARCHIVE_PREFIX}-{index}-{stem}.zip"


def fetch_archive(uri: str, *, destination: str, s3: S3Config | None) -> None:
    """Download the ``s3://`` archive ``uri`` to ``destination`` and check it.

    At most :data:`MAX_ARCHIVE_BYTES` are read: the object's size is asked first, and
    the copy stops there should the object grow in between (nothing is kept then)."""
    fs = get_filesystem(uri, s3=s3)
    try:
        try:
            size = fs.size(uri)
        except StorageNotFoundError:
            # A HEAD's answer has no body: a GET says whether the bucket or the key
            # is missing (and raises that).
            fs.read_bytes(uri)
            raise
        _check_archive_size(uri, size)
        copied = 0
        with fs.open_read(uri) as source, open(destination, "wb") as target:
            while chunk := source.read(_COPY_CHUNK):
                copied += len(chunk)
                if copied > MAX_ARCHIVE_BYTES:
                    break
                target.write(chunk)
        if copied > MAX_ARCHIVE_BYTES:
            os.unlink(destination)
            _check_archive_size(uri, copied)
    except StorageUnavailableError:
        raise
    except StorageError as exc:
        raise JobCodeError(source=uri, problem=exc.cause) from None
    except OSError as exc:
        raise JobCodeError(source=uri, problem=f"cannot be saved on the driver: "
                                               f"{exc.strerror or exc}") from None
    check_archive(destination, source=uri)
    log.info("fetched %s (%d bytes)", uri, os.path.getsize(destination))


def _check_archive_size(uri: str, size: int) -> None:
    if size > MAX_ARCHIVE_BYTES:
        raise JobCodeError(source=uri, problem=f"is {size} bytes, more than the "
                                               f"{MAX_ARCHIVE_BYTES} a code archive may have")


def check_archive(path: str, *, source: str) -> None:
    """Refuse an archive Python could not import from; warn about a misplaced top level."""
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
            names = archive.namelist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError):
        raise JobCodeError(source=source, problem="is not a readable zip archive") from None
    except OSError as exc:
        raise JobCodeError(source=source, problem=f"cannot be read: {exc.strerror or exc}"
                           ) from None
    if damaged is not None:
        raise JobCodeError(source=source, problem=f"is damaged: {damaged} fails its CRC check")
    top_level = {name.split("/", 1)[0] for name in names}
    importable = any(
        (name.endswith(".py") and "/" not in name)
        or (name.count("/") == 1 and name.endswith("/__init__.py"))
        for name in names
    )
    if not importable:
        shown = ", ".join(sorted(top_level)[:3]) or "nothing"
        log.warning("%s has no module or package at its top level (it holds %s); sys.path "
                    "sees the top level, so zip a folder's contents, not the folder",
                    source, shown)


def package_directory(directory: str, *, archive: str) -> int:
    """Zip the importable files below ``directory`` into ``archive``; returns how many.

    Nothing is written when there is nothing to import.
    """
    files = sorted(importable_files(directory))
    if not files:
        return 0
    folders = sorted({parent for name, _real in files for parent in _parents(name)})
    with zipfile.ZipFile(archive, "w") as target:
        for folder in folders:
            info = zipfile.ZipInfo(folder, date_time=ZIP_TIME)
            info.external_attr = DIRECTORY_MODE
            target.writestr(info, b"")
        for name, real in files:
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.external_attr = FILE_MODE
            info.compress_type = zipfile.ZIP_DEFLATED
            try:
                with open(real, "rb") as handle:
                    data = handle.read()
            except OSError as exc:
                raise JobCodeError(source=directory,
                                   problem=f"cannot read {name}: {exc.strerror or exc}") from None
            target.writestr(info, data)
    return len(files)


def _parents(name: str) -> Iterator[str]:
    """``a/b/c.py`` -> ``a/``, ``a/b/``: zipimport finds namespace packages only by
    their directory entries."""
    parts = name.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        yield "/".join(parts[:depth]) + "/"


def importable_files(root: str) -> Iterator[tuple[str, str]]:
    """``(name in the zip, resolved file)`` of every module below ``root``.

    Symbolic links are followed (a ConfigMap's visible names are links), each real
    directory at most once, so a link loop ends.
    """
    seen: set[str] = set()

    def walk(directory: str, prefix: str) -> Iterator[tuple[str, str]]:
        real_directory = os.path.realpath(directory)
        if real_directory in seen:
            return
        seen.add(real_directory)
        try:
            names = sorted(os.listdir(directory))
        except OSError as exc:
            raise JobCodeError(source=root, problem=f"cannot list {directory}: "
                                                    f"{exc.strerror or exc}") from None
        for name in names:
            if name.startswith(".") or name == "__pycache__":
                continue
            path = os.path.join(directory, name)
            if os.path.isdir(path):
                if name.isidentifier():
                    yield from walk(path, f"{prefix}{name}/")
            elif name.endswith(".py") and name[:-3].isidentifier() and os.path.isfile(path):
                yield f"{prefix}{name}", os.path.realpath(path)

    yield from walk(root, "")
