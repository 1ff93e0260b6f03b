"""``python -m job_runtime cleanup``: delete one job's checkpoint directories.

The operator runs this in a short-lived pod when a CheckpointedJob with
``cleanupPolicy.checkpoints: Delete`` is deleted. The pod, not the operator, holds
what the deletion needs: the job's volumes (for ``file://`` storage) and its S3
settings and credentials, which reach the environment exactly as the driver's do
(the kubelet resolves the credentials Secret). So the operator never reads a Secret
and never mounts a job's volume.

A mistake here deletes data, so the command deletes only directories of the
checkpoint layout, ``<root>/<job-name>-<job-uid>`` (see
:mod:`cjob_checkpoint.checkpoint_storage`), one per storage root the job ever used
(the operator records them in the job's status), and refuses any other URI before
touching storage. It aborts the uploads an executor or a driver left unfinished
there (invisible to a listing, billed all the same), and then lists again: the
operator deletes the job's checkpoint index only after a verified empty result.
Running it twice is harmless: a directory that is already gone is a success.

The outcome is one line, printed last and written to the container's termination
message file, which Kubernetes shows in the pod's status and the operator quotes in
its Event. Exit codes: 0 done, ``BAD_CONFIG`` for a refused URI, ``CLEANUP_FAILED``
when storage did not let the data be deleted, or something was still there after.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from cjob_checkpoint.checkpoint_storage import ensure_safe_segment
from cjob_checkpoint.keyword_error import keyword_error
from cjob_checkpoint.storage.errors import StorageError, StorageNotFoundError, UnsupportedUriError
from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.file_system import FileSystem
from cjob_checkpoint.storage.s3 import S3Config, is_s3_uri
from cjob_spec.exit_codes import ExitCode

DEFAULT_TERMINATION_LOG = "/dev/termination-log"
"""Where Kubernetes looks for a container's termination message (the pod default)."""
MAX_TERMINATION_MESSAGE = 4096
"""Kubernetes keeps at most 4096 bytes of a termination message."""


@keyword_error
class CleanupRefusedError(Exception):
    """The URI is not this job's checkpoint directory; nothing was touched."""

    uri: str
    cause: str

    def describe(self) -> str:
        return f"refusing to delete {self.uri}: {self.cause}"


@keyword_error
class CleanupIncompleteError(Exception):
    """Something is still there after the deletion: a writer that outlived the drivers,
    or storage that answered success without deleting. The data is kept and named."""

    remaining: tuple[tuple[str, int, int], ...]
    """``(uri, files, unfinished uploads)`` for every directory not empty afterwards."""

    def describe(self) -> str:
        parts = []
        for uri, files, uploads in self.remaining:
            what = [f"{files} files"] if files else []
            if uploads:
                what.append(f"{uploads} unfinished uploads")
            parts.append(f"{' and '.join(what)} remain under {uri}")
        return "; ".join(parts) + " after the deletion"


@dataclass(frozen=True, kw_only=True)
class CleanupResult:
    """What a cleanup found and removed, over every directory it was given."""

    uris: tuple[str, ...]
    files_deleted: int
    uploads_aborted: int = 0

    @property
    def message(self) -> str:
        where = ", ".join(self.uris)
        if self.files_deleted == 0 and self.uploads_aborted == 0:
            return f"nothing to delete under {where} (already gone)"
        aborted = (f" and aborted {self.uploads_aborted} unfinished uploads"
                   if self.uploads_aborted else "")
        return f"deleted {self.files_deleted} files{aborted} under {where}"


def job_directory(uri: str, *, job_name: str, job_uid: str) -> str:
    """``uri`` without a trailing slash, if it is ``<root>/<job_name>-<job_uid>``.

    Raises :class:`CleanupRefusedError` for anything else: another job's directory,
    a directory above or below the job's, a root with no path, ``.``/``..`` segments.
    """
    try:
        ensure_safe_segment(job_name, what="the job name")
        ensure_safe_segment(job_uid, what="the job uid")
    except StorageError as exc:
        raise CleanupRefusedError(uri=uri, cause=exc.cause) from None
    expected = f"{job_name}-{job_uid}"
    trimmed = uri.rstrip("/")
    parts = urlsplit(trimmed)
    if parts.query or parts.fragment:
        raise CleanupRefusedError(uri=uri, cause="a checkpoint URI has no '?' or '#' part")
    segments = parts.path.split("/")
    if any(segment in (".", "..") for segment in segments):
        raise CleanupRefusedError(uri=uri, cause="'.' and '..' segments are not allowed")
    root, _, last = trimmed.rpartition("/")
    if last != expected:
        raise CleanupRefusedError(
            uri=uri,
            cause=f"not the checkpoint directory of job {job_name} (uid {job_uid}): "
            f"expected <storage>/{expected}",
        )
    if is_s3_uri(trimmed):
        if not parts.netloc or parts.path.strip("/") == "":
            raise CleanupRefusedError(uri=uri, cause="expected s3://<bucket>[/<prefix>]/" + expected)
    elif not root or root.endswith(":"):
        raise CleanupRefusedError(uri=uri, cause="expected file:///<path>/" + expected)
    return trimmed


def delete_job_directories(
    uris: Sequence[str], *, fs_for: Callable[[str], FileSystem]
) -> CleanupResult:
    """Delete everything under each job directory in ``uris`` (checked by the caller),
    abort the uploads left unfinished there, then look again.

    The operator deletes the job's checkpoint index only on success, so success means
    verifiably empty: whatever is found afterwards raises
    :class:`CleanupIncompleteError`, which names it.
    """
    files = uploads = 0
    remaining: list[tuple[str, int, int]] = []
    for uri in uris:
        fs = fs_for(uri)
        try:
            files += len(fs.list(uri))
            uploads += fs.abort_uploads(uri)
            fs.delete_prefix(uri)
            left = (uri, len(fs.list(uri)), len(fs.unfinished_uploads(uri)))
        except StorageNotFoundError:
            continue  # the bucket itself is gone: so is everything in it
        if left[1] or left[2]:
            remaining.append(left)
    if remaining:
        raise CleanupIncompleteError(remaining=tuple(remaining))
    return CleanupResult(uris=tuple(uris), files_deleted=files, uploads_aborted=uploads)


def run_cleanup(
    *, uris: Sequence[str], job_name: str, job_uid: str, termination_log: str | None
) -> int:
    """The ``cleanup`` subcommand: check every URI, delete, report one line; returns
    the exit code. One URI that is not the job's refuses them all, before any deletion."""
    try:
        directories = list(dict.fromkeys(
            job_directory(uri, job_name=job_name, job_uid=job_uid) for uri in uris))
        config = S3Config.from_env()
        result = delete_job_directories(
            directories, fs_for=lambda directory: get_filesystem(directory, s3=config))
    except CleanupRefusedError as exc:
        return _finish(str(exc), code=ExitCode.BAD_CONFIG, termination_log=termination_log)
    except UnsupportedUriError as exc:
        return _finish(f"refusing to delete {exc.uri}: {exc.cause}", code=ExitCode.BAD_CONFIG,
                       termination_log=termination_log)
    except CleanupIncompleteError as exc:
        return _finish(f"checkpoint data kept: {exc}", code=ExitCode.CLEANUP_FAILED,
                       termination_log=termination_log)
    except StorageError as exc:
        return _finish(f"checkpoint data kept: {exc}", code=ExitCode.CLEANUP_FAILED,
                       termination_log=termination_log)
    return _finish(result.message, code=ExitCode.FINISHED, termination_log=termination_log)


def _finish(message: str, *, code: int, termination_log: str | None) -> int:
    line = " ".join(message.split())
    stream = sys.stdout if code == ExitCode.FINISHED else sys.stderr
    stream.write(line + "\n")
    stream.flush()
    write_termination_message(line, path=termination_log)
    return code


def write_termination_message(message: str, *, path: str | None) -> None:
    """Write ``message`` where Kubernetes reads the termination message.

    Only into a file that exists: the kubelet creates it for every container, while
    outside a container the default path is no place to create files.
    """
    if not path or not os.path.isfile(path):
        return
    data = message.encode()[:MAX_TERMINATION_MESSAGE]
    try:
        with open(path, "wb") as handle:
            handle.write(data)
    except OSError:
        pass  # the message is in the log too
