"""``python -m job_runtime take-snapshot`` and ``dispose-snapshot``: a snapshot pod's work.

The operator runs these in a short-lived pod for a CheckpointedJobSnapshot, built as
the job's cleanup pod is: the job's image, volumes and S3 environment (credentials
resolved by the kubelet), so the operator never reads a Secret or mounts a volume.

``take-snapshot`` copies one completed checkpoint into the snapshot's own directory,
``<storage>/snapshots/<snapshot>-<uid>`` (:func:`cjob_checkpoint.snapshot
.snapshot_checkpoint`: every file checked, ``_metadata`` written last), so deleting
the job and its checkpoints leaves it. Taken again (the pod ran twice) it writes the
same copy. ``dispose-snapshot`` deletes that directory when the snapshot object is
deleted with ``disposeOnDelete``, and looks again: success means verifiably empty.

Both refuse a directory that is not a snapshot's before touching storage: a mistake
here deletes or overwrites data. The outcome is a :class:`SnapshotOutcome`, printed
last and written as the container's termination message, which the operator reads.
Exit codes: 0 done, ``BAD_CONFIG`` for a refused argument, ``RESTORE_FAILED`` for a
checkpoint that cannot be read (pruned, damaged), ``STORAGE_UNREACHABLE`` when storage
failed (the operator tries again), ``CLEANUP_FAILED`` when data was left behind.
"""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

from cjob_checkpoint.checkpoint_storage import ensure_safe_segment, parse_checkpoint_uri
from cjob_checkpoint.metadata import MetadataError
from cjob_checkpoint.snapshot import snapshot_checkpoint
from cjob_checkpoint.storage.errors import CorruptDataError, StorageError, UnsupportedUriError
from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.s3 import S3Config
from cjob_checkpoint.store.completed_store import UnreadableCheckpointError
from cjob_spec.exit_codes import ExitCode
from cjob_spec.names import SNAPSHOTS_DIR
from cjob_spec.snapshot_outcome import SnapshotOutcome, SnapshotTask
from job_runtime.cleanup import (
    CleanupIncompleteError,
    delete_job_directories,
    write_termination_message,
)


class SnapshotRefusedError(ValueError):
    """An argument that names no snapshot directory or checkpoint; nothing was touched."""


def snapshot_directory(uri: str, *, snapshot_name: str, snapshot_uid: str) -> str:
    """``uri`` without a trailing slash if it is ``<storage>/snapshots/<name>-<uid>``;
    raises :class:`SnapshotRefusedError` for anything else."""
    try:
        ensure_safe_segment(snapshot_name, what="the snapshot name")
        ensure_safe_segment(snapshot_uid, what="the snapshot uid")
    except StorageError as exc:
        raise SnapshotRefusedError(f"refusing {uri}: {exc.cause}") from None
    trimmed = uri.rstrip("/")
    parts = urlsplit(trimmed)
    if parts.scheme not in ("file", "s3") or parts.query or parts.fragment:
        raise SnapshotRefusedError(f"refusing {uri}: expected a file:// or s3:// directory "
                                   f"with no '?' or '#' part")
    segments = parts.path.split("/")
    if any(segment in (".", "..") for segment in segments):
        raise SnapshotRefusedError(f"refusing {uri}: '.' and '..' segments are not allowed")
    if segments[-2:] != [SNAPSHOTS_DIR, f"{snapshot_name}-{snapshot_uid}"]:
        raise SnapshotRefusedError(
            f"refusing {uri}: not the directory of snapshot {snapshot_name} (uid "
            f"{snapshot_uid}): expected <storage>/{SNAPSHOTS_DIR}/{snapshot_name}-{snapshot_uid}")
    return trimmed


def take_snapshot(*, checkpoint: str, target: str, snapshot_name: str,
                  snapshot_uid: str) -> tuple[SnapshotOutcome, int]:
    """Copy the checkpoint whose ``_metadata`` is ``checkpoint`` into ``target``."""
    task = SnapshotTask.TAKE
    try:
        directory = snapshot_directory(target, snapshot_name=snapshot_name,
                                       snapshot_uid=snapshot_uid)
        parse_checkpoint_uri(checkpoint)
    except SnapshotRefusedError as exc:
        return SnapshotOutcome(task=task, error=str(exc)), ExitCode.BAD_CONFIG
    except StorageError as exc:
        return (SnapshotOutcome(task=task, error=f"refusing {checkpoint}: {exc.cause}"),
                ExitCode.BAD_CONFIG)
    try:
        config = S3Config.from_env()
        source_fs = get_filesystem(checkpoint, s3=config)
        target_fs = get_filesystem(directory, s3=config)
        taken = snapshot_checkpoint(checkpoint=checkpoint, target=directory, name=snapshot_name,
                                    source_fs=source_fs, target_fs=target_fs)
    except UnsupportedUriError as exc:
        return (SnapshotOutcome(task=task, error=f"refusing {exc.uri}: {exc.cause}"),
                ExitCode.BAD_CONFIG)
    except (UnreadableCheckpointError, MetadataError, CorruptDataError) as exc:
        return (SnapshotOutcome(task=task, error=f"checkpoint {checkpoint} cannot be copied: "
                                                 f"{exc}"), ExitCode.RESTORE_FAILED)
    except StorageError as exc:
        return SnapshotOutcome(task=task, error=str(exc)), ExitCode.STORAGE_UNREACHABLE
    return (SnapshotOutcome(task=task, path=taken.metadata_uri,
                            checkpoint_id=taken.metadata.checkpoint_id, files=taken.files,
                            size_bytes=taken.size_bytes), ExitCode.FINISHED)


def dispose_snapshot(*, target: str, snapshot_name: str,
                     snapshot_uid: str) -> tuple[SnapshotOutcome, int]:
    """Delete everything below ``target``, then check that nothing is left."""
    task = SnapshotTask.DISPOSE
    try:
        directory = snapshot_directory(target, snapshot_name=snapshot_name,
                                       snapshot_uid=snapshot_uid)
        config = S3Config.from_env()
        result = delete_job_directories(
            [directory], fs_for=lambda uri: get_filesystem(uri, s3=config))
    except SnapshotRefusedError as exc:
        return SnapshotOutcome(task=task, error=str(exc)), ExitCode.BAD_CONFIG
    except UnsupportedUriError as exc:
        return (SnapshotOutcome(task=task, error=f"refusing {exc.uri}: {exc.cause}"),
                ExitCode.BAD_CONFIG)
    except CleanupIncompleteError as exc:
        return SnapshotOutcome(task=task, error=f"snapshot data kept: {exc}"), \
            ExitCode.CLEANUP_FAILED
    except StorageError as exc:
        return SnapshotOutcome(task=task, error=f"snapshot data kept: {exc}"), \
            ExitCode.STORAGE_UNREACHABLE
    return SnapshotOutcome(task=task, files=result.files_deleted), ExitCode.FINISHED


def report(outcome: SnapshotOutcome, code: int, *, termination_log: str | None) -> int:
    """Print the outcome as the last line and hand it to Kubernetes; returns ``code``."""
    message = outcome.to_message()
    stream = sys.stdout if code == ExitCode.FINISHED else sys.stderr
    stream.write(message + "\n")
    stream.flush()
    write_termination_message(message, path=termination_log)
    return code
