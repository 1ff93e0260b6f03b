"""Restore resolution: which checkpoint a driver starts from, and what it fell back past.

``spec.restore.from`` (``latest``, ``none``, a checkpoint id or a ``_metadata``
path, possibly another job's) is resolved against the completed-checkpoint store
and checkpoint storage once, before the coordinator starts. With
``onUnreadable: fallback`` a damaged checkpoint is skipped for an older one and
the skip is noted; the result names the checkpoint, its typed metadata, and the
notes and skipped pointers the restore report and the status file show.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata, MetadataError
from cjob_checkpoint.store.completed_store import (
    CompletedCheckpoint,
    CompletedCheckpointStore,
    NoRestorableCheckpointError,
    UnreadableCheckpointError,
)
from cjob_checkpoint.store.restorable import Candidate, first_readable
from cjob_checkpoint.store.restore_report import (
    RestoredCheckpoint,
    RestoreReport,
    clip_dropped,
)
from cjob_spec.model import OnUnreadable
from job_runtime.errors import RestoreError
from job_runtime.execution.driver.driver_settings import DriverSettings


def _typed(metadata: Any, *, pointer: str) -> CheckpointMetadata:
    """The checked JSON of ``_metadata`` as its type; a layout this runtime cannot read
    (a newer version, a damaged field) fails the restore with a sentence."""
    try:
        return CheckpointMetadata.from_json(metadata)
    except MetadataError as exc:
        raise RestoreError(pointer=pointer, problem=f"its metadata cannot be read: {exc}") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoreResolution:
    """Where the driver starts: the checkpoint (``None``: empty state) and its metadata.

    ``notes`` describe fallbacks for the log and the embedded status; ``skipped`` are
    the checkpoints passed over as unreadable, which the restore report names.
    """

    checkpoint: CompletedCheckpoint | None
    metadata: CheckpointMetadata | None
    notes: list[str]
    skipped: tuple[RestoredCheckpoint, ...] = ()
    origin_job: str | None = None
    """The job that wrote ``checkpoint``, when it is not this job (an allowed foreign
    restore): its output newer than the checkpoint is withdrawn like this job's own."""
    dropped: tuple[str, ...] = ()
    """The checkpoint's state left out because the pipeline no longer maps it
    (``spec.restore.allowNonRestoredState``), one sentence each."""

    @property
    def fallback_from(self) -> RestoredCheckpoint | None:
        """The newest skipped checkpoint newer than the one restored: what a fallback
        left behind (a damaged older pointer is no fallback)."""
        floor = -1 if self.checkpoint is None else self.checkpoint.checkpoint_id
        newer = [c for c in self.skipped if c.id > floor]
        return max(newer, key=lambda c: c.id) if newer else None

    def report(self, *, attempt: int) -> RestoreReport:
        restored = None if self.checkpoint is None else RestoredCheckpoint(
            id=self.checkpoint.checkpoint_id, path=self.checkpoint.metadata_path)
        return RestoreReport(attempt=attempt, checkpoint=restored,
                             fallback_from=self.fallback_from,
                             dropped=clip_dropped(self.dropped))


def check_sinks(metadata: CheckpointMetadata, *, sinks: set[str], pointer: str) -> None:
    """Refuse a restore that would leave pending transactions uncommitted: the output
    of a sink the checkpoint knows and the job no longer has (renamed or removed)
    would otherwise be lost without a word."""
    orphaned = sorted(metadata.sink_names() - sinks)
    if orphaned:
        raise RestoreError(
            pointer=pointer,
            problem=f"it holds uncommitted output of sink {', '.join(map(repr, orphaned))}, "
                    f"which the job no longer has (its sinks: {', '.join(sorted(sinks))}); "
                    f"keep that sink's name (sink(..., name=...)) or restore another "
                    f"checkpoint")


def record_restore(*, store: CompletedCheckpointStore, attempt: int,
                   resolution: RestoreResolution) -> bool:
    """Record what this attempt restores, for the operator's ``status.restoredFrom``.

    Done once, right after resolving and before the first checkpoint, so it never
    competes with a commit. A failure to record is logged by the store and does not
    fail the job; a fenced attempt raises :class:`FencedError`, because it must stop.
    """
    return store.record_restore(resolution.report(attempt=attempt))


def resolve_restore(
    *, settings: DriverSettings, storage: CheckpointStorage, store: CompletedCheckpointStore
) -> RestoreResolution:
    """The checkpoint to start from, its metadata, and what fallbacks were taken.

    The request decides which checkpoints are candidates, newest first; the store's
    own fallback walk (:func:`first_readable`) picks the first that reads.
    """
    request = settings.restore.strip()
    if request in ("", "none"):
        return RestoreResolution(checkpoint=None, metadata=None, notes=[])
    notes: list[str] = []
    retained: list[Candidate] = list(reversed(store.retained_pointers()))
    newest = retained[0].checkpoint_id if retained else None
    candidates: list[Candidate]
    if request == "latest":
        candidates = retained
    elif (newest is not None and not settings.restore_exact
          and _checkpoint_id_of_request(request) < newest):
        # ``restore.from`` names where a job *starts*. Once the job has completed a
        # newer checkpoint, every later attempt resumes from that one instead.
        notes.append(f"the store holds checkpoint {newest}, newer than "
                     f"the requested {request}; restoring the newest")
        candidates = retained
    elif request.isdigit():
        wanted = int(request)
        found = [c for c in retained if c.checkpoint_id == wanted]
        if not found:
            path = storage.metadata_uri(wanted)
            found = [CompletedCheckpoint(checkpoint_id=wanted, metadata_path=path, timestamp=0.0)]
        candidates = found + [c for c in retained if c.checkpoint_id < wanted]
    else:
        foreign = not storage.is_own_checkpoint(request)
        snapshot = _snapshot_at(request, storage=storage) if foreign else None
        if snapshot is not None:
            return _restore_snapshot(request, metadata=snapshot, settings=settings,
                                     notes=notes)
        if foreign and not settings.allow_foreign_restore:
            raise RestoreError(pointer=request,
                               problem=f"it is not a checkpoint of job {settings.job_id} "
                                       f"(expected a path below {storage.job_dir}/); to "
                                       f"continue another job's checkpoint, set "
                                       f"spec.restore.allowForeignJob: true")
        if foreign:
            # Only the named checkpoint: this job's own store holds nothing older of it.
            return _restore_foreign(request, storage=storage, settings=settings,
                                    notes=notes)
        found_id = _checkpoint_id_of(request)
        candidates = [CompletedCheckpoint(checkpoint_id=found_id, metadata_path=request,
                                          timestamp=0.0)]
        candidates += [c for c in retained if c.checkpoint_id < found_id]
    try:
        chosen = first_readable(candidates, read=storage.read_metadata,
                                fallback=settings.on_unreadable is OnUnreadable.FALLBACK_TO_PREVIOUS)
    except NoRestorableCheckpointError as exc:
        raise RestoreError(pointer=settings.restore,
                           problem=f"no readable checkpoint to fall back to ({exc.cause})"
                           ) from None
    except UnreadableCheckpointError as exc:
        raise RestoreError(pointer=exc.path, problem=exc.cause) from None
    notes += chosen.notes
    skipped = tuple(RestoredCheckpoint(id=problem.checkpoint_id, path=problem.path)
                    for problem in chosen.skipped)
    if chosen.checkpoint is None:
        return RestoreResolution(checkpoint=None, metadata=None, notes=notes, skipped=skipped)
    pointer = chosen.checkpoint.metadata_path
    assert isinstance(chosen.metadata, bytes)
    try:
        metadata = json.loads(chosen.metadata)
    except ValueError as exc:
        raise RestoreError(pointer=pointer, problem=f"metadata is not valid JSON: {exc}") from None
    if metadata.get("job") != settings.job_id:
        raise RestoreError(pointer=pointer, problem=f"it belongs to job {metadata.get('job')!r}")
    return RestoreResolution(checkpoint=chosen.checkpoint,
                             metadata=_typed(metadata, pointer=pointer),
                             notes=notes, skipped=skipped)


def _restore_foreign(request: str, *, storage: CheckpointStorage, settings: DriverSettings,
                     notes: list[str]) -> RestoreResolution:
    """Another job's checkpoint, allowed by ``spec.restore.allowForeignJob``.

    No fallback: an older checkpoint of a stranger is not what anyone asked for, so an
    unreadable one fails the restore whatever ``onUnreadable`` says.
    """
    checkpoint_id = _checkpoint_id_of(request)
    if checkpoint_id < 0:
        raise RestoreError(pointer=request,
                           problem="it is not a checkpoint path (expected "
                                   "<storage>/<job>-<uid>/chk-<id>/_metadata)")
    try:
        metadata = json.loads(storage.read_metadata(request))
    except UnreadableCheckpointError as exc:
        raise RestoreError(pointer=request, problem=exc.cause) from None
    except ValueError as exc:
        raise RestoreError(pointer=request, problem=f"metadata is not valid JSON: {exc}") from None
    origin = metadata.get("job") if isinstance(metadata, dict) else None
    if not isinstance(origin, str) or not origin:
        raise RestoreError(pointer=request, problem="its metadata names no job")
    if origin == settings.job_id:
        raise RestoreError(pointer=request,
                           problem=f"its metadata says it belongs to this job, but its path is "
                                   f"not below {storage.job_dir}/")
    # The origin's output newer than the checkpoint is withdrawn: the job must be the
    # one whose directory holds the file, never whatever a file says it is.
    directory = _job_directory_of(request)
    if directory != origin:
        raise RestoreError(pointer=request,
                           problem=f"its metadata names job {origin!r} but lies in the "
                                   f"directory of job {directory!r}")
    notes.append(f"restoring checkpoint {checkpoint_id} of job {origin} "
                 f"(spec.restore.allowForeignJob)")
    checkpoint = CompletedCheckpoint(checkpoint_id=checkpoint_id, metadata_path=request,
                                     timestamp=0.0)
    return RestoreResolution(checkpoint=checkpoint, metadata=_typed(metadata, pointer=request),
                             notes=notes, origin_job=origin)


def _snapshot_at(request: str, *, storage: CheckpointStorage) -> CheckpointMetadata | None:
    """The metadata at ``request`` when it is a snapshot's (``None``: it is not one, or
    it cannot be read: the foreign path says why)."""
    if _checkpoint_id_of(request) < 0:
        return None
    try:
        metadata = json.loads(storage.read_metadata(request))
    except (UnreadableCheckpointError, ValueError):
        return None
    if not isinstance(metadata, dict) or "snapshot" not in metadata:
        return None
    return _typed(metadata, pointer=request)


def _restore_snapshot(request: str, *, metadata: CheckpointMetadata, settings: DriverSettings,
                      notes: list[str]) -> RestoreResolution:
    """A snapshot: the user's explicit choice of state, this job's or another's, so it
    needs no ``allowForeignJob``. Another job's output newer than the snapshot's
    checkpoint is withdrawn as after a foreign restore."""
    assert metadata.snapshot is not None
    directory = _job_directory_of(request)
    if directory != metadata.job:
        raise RestoreError(pointer=request,
                           problem=f"its metadata names job {metadata.job!r} but lies in the "
                                   f"directory of job {directory!r}")
    origin = None if metadata.job == settings.job_id else metadata.job
    notes.append(f"restoring snapshot {metadata.snapshot.name!r} (checkpoint "
                 f"{metadata.checkpoint_id} of job {metadata.job})")
    checkpoint = CompletedCheckpoint(checkpoint_id=metadata.checkpoint_id,
                                     metadata_path=request, timestamp=0.0)
    return RestoreResolution(checkpoint=checkpoint, metadata=metadata, notes=notes,
                             origin_job=origin)


def _checkpoint_id_of_request(request: str) -> int:
    return int(request) if request.isdigit() else _checkpoint_id_of(request)


def _job_directory_of(path: str) -> str:
    """The job directory (``<job>-<uid>``) a ``.../<job>-<uid>/chk-<id>/_metadata`` path
    lies in."""
    match = re.search(r"([^/]*)/chk-\d+(?:/|$)", path)
    return match.group(1) if match else ""


def _checkpoint_id_of(path: str) -> int:
    match = re.search(r"/chk-(\d+)(?:/|$)", path)
    return int(match.group(1)) if match else -1


