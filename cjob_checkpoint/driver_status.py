"""The driver's status file: a typed, versioned model the driver writes and the runner reads.

``python -m job_runtime run --status-file PATH`` rewrites PATH about once a
second (and once more at the end, with the checkpoint history). ``cjob run``
reads it to show progress lines and to decide when to kill a driver on purpose;
tests read it to see what a driver restored. Writer and readers live in
different processes and may even be different releases, so the file is a
:class:`DriverStatus` with a format ``version``, not a dict whose keys each
reader guesses. The JSON keys are camelCase, as they always were; a file
without ``version`` is version 1, written before the field existed.

It lives with the checkpoint data rather than in the runtime because the CLI
reads it and must not load the engine to do so (an import-linter contract keeps
the CLI off the runtime).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from cjob_checkpoint.fields import Json, JsonFields
from cjob_checkpoint.storage.local import write_file_atomically

FORMAT_VERSION = 1


class StatusFileError(ValueError):
    """A status file this runtime cannot read; the message names the problem."""


class _Fields(JsonFields):
    error = StatusFileError


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointCounts:
    """Completed and failed checkpoints, with percentiles of the recent ones."""

    completed: int = 0
    failed: int = 0
    duration_ms_p50: float = 0.0
    duration_ms_p99: float = 0.0
    sync_ms_p99: float = 0.0
    alignment_ms_p99: float = 0.0
    recent: tuple[Json, ...] = ()
    """The last few checkpoints' statistics (the coordinator's own shape)."""

    def to_json(self) -> dict[str, Json]:
        return {"completed": self.completed, "failed": self.failed,
                "durationMsP50": self.duration_ms_p50, "durationMsP99": self.duration_ms_p99,
                "syncMsP99": self.sync_ms_p99, "alignmentMsP99": self.alignment_ms_p99,
                "recent": list(self.recent)}

    @classmethod
    def from_json(cls, fields: _Fields) -> CheckpointCounts:
        return cls(completed=fields.integer("completed"), failed=fields.integer("failed"),
                   duration_ms_p50=fields.number("durationMsP50"),
                   duration_ms_p99=fields.number("durationMsP99"),
                   sync_ms_p99=fields.number("syncMsP99"),
                   alignment_ms_p99=fields.number("alignmentMsP99"),
                   recent=tuple(fields.array("recent")))


@dataclasses.dataclass(frozen=True, kw_only=True)
class LatestCheckpoint:
    """The newest checkpoint this driver completed."""

    id: int
    path: str
    completed_at: float
    size_bytes: int

    def to_json(self) -> dict[str, Json]:
        return {"id": self.id, "path": self.path, "completedAt": self.completed_at,
                "sizeBytes": self.size_bytes}

    @classmethod
    def from_json(cls, fields: _Fields) -> LatestCheckpoint:
        return cls(id=fields.integer("id"), path=fields.text("path"),
                   completed_at=fields.number("completedAt"),
                   size_bytes=fields.integer("sizeBytes"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoredFrom:
    """The checkpoint the running subtasks restored."""

    id: int
    path: str

    def to_json(self) -> dict[str, Json]:
        return {"id": self.id, "path": self.path}

    @classmethod
    def from_json(cls, fields: _Fields) -> RestoredFrom:
        return cls(id=fields.integer("id"), path=fields.text("path"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class DriverStatus:
    """One write of the status file."""

    state: str
    """``running``, ``finished`` or ``failed``."""
    pid: int
    updated_at: float
    attempt: int
    epoch: int
    """The subtasks' current epoch (Spark's stage attempt); ``-1`` before they registered."""
    subtask_restarts: int
    records_in: int
    records_out: int
    checkpoints: CheckpointCounts
    latest_checkpoint: LatestCheckpoint | None
    restored_from: RestoredFrom | None
    timeline: dict[str, float]
    """Wall-clock milestones of the driver and the current epoch (``sparkReadyAt``, ...)."""
    rejected_connections: int
    fallback_notes: tuple[str, ...] = ()
    """What restore resolution fell back past, one sentence each."""
    checkpoint_history: tuple[Json, ...] | None = None
    """Every remembered checkpoint's statistics; only in the last write."""
    watermark: int | None = None
    """The job's event-time watermark (ms since the epoch, the lowest of its windowed
    subtasks); ``None`` without event time."""
    late_records: int = 0
    """Records the job's windows dropped as too late, in this driver."""

    @property
    def started(self) -> bool:
        """Whether the subtasks run (Spark is up and they registered)."""
        return self.epoch >= 0

    def to_json(self) -> dict[str, Json]:
        body: dict[str, Json] = {
            "version": FORMAT_VERSION,
            "state": self.state,
            "pid": self.pid,
            "updatedAt": self.updated_at,
            "epoch": self.epoch,
            "subtaskRestarts": self.subtask_restarts,
            "recordsIn": self.records_in,
            "recordsOut": self.records_out,
            "checkpoints": self.checkpoints.to_json(),
            "latestCheckpoint": (None if self.latest_checkpoint is None
                                 else self.latest_checkpoint.to_json()),
            "restoredFrom": None if self.restored_from is None else self.restored_from.to_json(),
            "timeline": dict(self.timeline),
            "rejectedConnections": self.rejected_connections,
            "fallbackNotes": list(self.fallback_notes),
            "attempt": self.attempt,
            "watermark": self.watermark,
            "lateRecords": self.late_records,
        }
        if self.checkpoint_history is not None:
            body["checkpointHistory"] = list(self.checkpoint_history)
        return body

    @classmethod
    def from_json(cls, data: Json) -> DriverStatus:
        fields = _Fields(data, where="the driver status file")
        version = fields.value("version") if fields.has("version") else 1
        if version != FORMAT_VERSION or isinstance(version, bool):
            raise StatusFileError(f"driver status format version {version!r} is not supported "
                                  f"(this runtime reads version {FORMAT_VERSION})")
        latest = fields.optional_object("latestCheckpoint")
        restored = fields.optional_object("restoredFrom")
        timeline = fields.object("timeline")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                   for v in timeline.values()):
            raise StatusFileError("'timeline' of the driver status file must map names to "
                                  "numbers")
        notes = fields.array("fallbackNotes")
        if not all(isinstance(n, str) for n in notes):
            raise StatusFileError("'fallbackNotes' of the driver status file must be strings")
        history = fields.value("checkpointHistory")
        return cls(
            state=fields.text("state"), pid=fields.integer("pid"),
            updated_at=fields.number("updatedAt"), attempt=fields.integer("attempt"),
            epoch=fields.integer("epoch"), subtask_restarts=fields.integer("subtaskRestarts"),
            records_in=fields.integer("recordsIn"), records_out=fields.integer("recordsOut"),
            checkpoints=CheckpointCounts.from_json(fields.nested("checkpoints")),
            latest_checkpoint=None if latest is None else LatestCheckpoint.from_json(
                fields.child(latest, where="'latestCheckpoint' of the driver status file")),
            restored_from=None if restored is None else RestoredFrom.from_json(
                fields.child(restored, where="'restoredFrom' of the driver status file")),
            timeline={name: float(value) for name, value in timeline.items()},
            rejected_connections=fields.integer("rejectedConnections"),
            fallback_notes=tuple(notes),
            checkpoint_history=None if not isinstance(history, list) else tuple(history),
            # Absent from an older driver's file: no event time there.
            watermark=fields.optional_integer("watermark"),
            late_records=fields.integer("lateRecords") if fields.has("lateRecords") else 0)


def write_status_file(path: str, status: DriverStatus) -> None:
    """Replace ``path`` at once: a reader sees the previous write or this one, never half."""
    write_file_atomically(path, json.dumps(status.to_json(), indent=2).encode())


def read_status_file(path: Path) -> DriverStatus:
    """The status at ``path``; raises :class:`OSError` or :class:`StatusFileError`."""
    try:
        data = json.loads(path.read_bytes())
    except (UnicodeDecodeError, ValueError) as exc:
        raise StatusFileError(f"the driver status file {path} is not valid JSON: {exc}") from None
    return DriverStatus.from_json(data)
