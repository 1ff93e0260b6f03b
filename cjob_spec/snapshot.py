"""The CheckpointedJobSnapshot resource: what a user asks for, and what the operator
reports.

A snapshot is a durable, self-contained copy of one completed checkpoint of a job:
never pruned by ``retained``, still readable after the job and its checkpoints are
deleted, and restorable into the same or another job (``spec.restore.snapshot``).
The spec names the job and, optionally, the checkpoint (the job's latest by default);
it cannot change once applied (a CEL rule), except ``disposeOnDelete``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from cjob_spec.errors import SpecError
from cjob_spec.names import API_VERSION, MAX_JOB_NAME_LENGTH, SNAPSHOT_KIND
from cjob_spec.schema import patterns
from cjob_spec.status import Condition
from cjob_spec.times import format_time, parse_time

JOB_NAME = re.compile(patterns.JOB_NAME)
SPEC_FIELDS = ("jobName", "checkpoint", "disposeOnDelete")
DEFAULT_DISPOSE_ON_DELETE = True
"""Delete the copy with the object (as Flink's operator does by default)."""


class SnapshotState(StrEnum):
    """Where a snapshot is: the printer column and ``status.state``."""

    PENDING = "Pending"
    """Waiting for its job, or for the job's first (or the named) checkpoint."""
    IN_PROGRESS = "InProgress"
    """Its pod copies the checkpoint."""
    COMPLETED = "Completed"
    FAILED = "Failed"

    @property
    def is_final(self) -> bool:
        return self in (SnapshotState.COMPLETED, SnapshotState.FAILED)


class SnapshotTrigger(StrEnum):
    """Why the operator took a snapshot by itself (``spec.snapshots``)."""

    SCHEDULED = "Scheduled"
    UPGRADE = "Upgrade"


class SnapshotReason(StrEnum):
    """The reasons of a snapshot's condition and Events."""

    WAITING_FOR_JOB = "WaitingForJob"
    WAITING_FOR_CHECKPOINT = "WaitingForCheckpoint"
    HOLDING = "HoldingCheckpoint"
    NOT_RETAINED = "CheckpointNotRetained"
    COPYING = "Copying"
    COMPLETED = "SnapshotCompleted"
    RETRYING = "SnapshotRetrying"
    FAILED = "SnapshotFailed"
    INVALID_SPEC = "InvalidSpec"
    DISPOSED = "SnapshotDisposed"
    KEPT = "SnapshotKept"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SnapshotSpec:
    job_name: str
    checkpoint_id: int | None = None
    """The checkpoint to copy; ``None``: the job's latest when the snapshot is taken."""
    dispose_on_delete: bool = DEFAULT_DISPOSE_ON_DELETE


def parse_snapshot_spec(document: Mapping[str, Any]) -> SnapshotSpec:
    """Validate a CheckpointedJobSnapshot; raises :class:`SpecError` naming the field.

    The CRD's schema refuses the same at apply time; this is for objects that got past
    an older schema, and for the error's wording in the status.
    """
    if document.get("apiVersion") != API_VERSION:
        raise SpecError(field="apiVersion", problem=f"must be {API_VERSION!r}")
    if document.get("kind") != SNAPSHOT_KIND:
        raise SpecError(field="kind", problem=f"must be {SNAPSHOT_KIND!r}")
    spec = document.get("spec")
    if not isinstance(spec, Mapping):
        raise SpecError(field="spec", problem="is required")
    unknown = sorted(set(spec) - set(SPEC_FIELDS))
    if unknown:
        raise SpecError(field=f"spec.{unknown[0]}", problem="is not a field of a snapshot")
    job_name = spec.get("jobName")
    if not isinstance(job_name, str) or not job_name:
        raise SpecError(field="spec.jobName", problem="is required: the CheckpointedJob to copy")
    if len(job_name) > MAX_JOB_NAME_LENGTH or not JOB_NAME.match(job_name):
        raise SpecError(field="spec.jobName", problem=f"{job_name!r} is not a job's name")
    checkpoint = spec.get("checkpoint")
    if checkpoint is not None and (not isinstance(checkpoint, int) or isinstance(checkpoint, bool)
                                   or checkpoint < 1):
        raise SpecError(field="spec.checkpoint", problem="must be a checkpoint id (1 or more)")
    dispose = spec.get("disposeOnDelete", DEFAULT_DISPOSE_ON_DELETE)
    if not isinstance(dispose, bool):
        raise SpecError(field="spec.disposeOnDelete", problem="must be true or false")
    return SnapshotSpec(job_name=job_name, checkpoint_id=checkpoint, dispose_on_delete=dispose)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SnapshotStatus:
    """``status`` of a CheckpointedJobSnapshot; empty means never reconciled."""

    state: SnapshotState | None = None
    reason: str | None = None
    message: str | None = None
    job_uid: str | None = None
    """The uid of the job copied: a job deleted and created again under the same name is
    another job, whose checkpoints this snapshot never mixes in."""
    checkpoint_id: int | None = None
    source: str | None = None
    """The checkpoint's ``_metadata`` being (or that was) copied."""
    target: str | None = None
    """The snapshot's directory (``<storage>/snapshots/<name>-<uid>``)."""
    path: str | None = None
    """The copy's ``_metadata``: what ``restore.snapshot`` restores."""
    size_bytes: int | None = None
    files: int | None = None
    completed_at: datetime | None = None
    failures: int = 0
    """Failed copies tried again (storage unreachable), at most ``MAX_TRIES - 1``."""
    job_spec: Mapping[str, Any] | None = None
    """The job's spec when the copy started: how a pod reaches the snapshot's storage
    (image, volumes, S3 settings), kept so the copy can be disposed of after the job is
    gone. Written by the operator in the status, which users do not write."""
    conditions: tuple[Condition, ...] = ()
    observed_generation: int | None = None

    def replace(self, **changes: Any) -> SnapshotStatus:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        pairs: list[tuple[str, Any]] = [
            ("state", self.state.value if self.state else None), ("reason", self.reason),
            ("message", self.message), ("jobUid", self.job_uid),
            ("checkpointId", self.checkpoint_id), ("source", self.source),
            ("target", self.target), ("path", self.path), ("sizeBytes", self.size_bytes),
            ("files", self.files),
            ("completedAt", format_time(self.completed_at) if self.completed_at else None),
            ("failures", self.failures or None),
            ("jobSpec", dict(self.job_spec) if self.job_spec is not None else None),
            ("observedGeneration", self.observed_generation),
        ]
        result.update((key, value) for key, value in pairs if value is not None)
        if self.conditions:
            result["conditions"] = [c.to_dict() for c in self.conditions]
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SnapshotStatus:
        data = data or {}
        try:
            state = SnapshotState(data["state"]) if data.get("state") else None
        except ValueError:
            state = None
        completed = data.get("completedAt")
        conditions = tuple(c for c in (Condition.from_dict(item) for item in
                                       data.get("conditions") or [] if isinstance(item, Mapping))
                           if c is not None)
        spec = data.get("jobSpec")
        return cls(
            state=state, reason=_text(data, "reason"), message=_text(data, "message"),
            job_uid=_text(data, "jobUid"), checkpoint_id=_number(data, "checkpointId"),
            source=_text(data, "source"), target=_text(data, "target"), path=_text(data, "path"),
            size_bytes=_number(data, "sizeBytes"), files=_number(data, "files"),
            completed_at=_moment(completed),
            failures=_number(data, "failures") or 0,
            job_spec=spec if isinstance(spec, Mapping) else None,
            conditions=conditions, observed_generation=_number(data, "observedGeneration"))


def _moment(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def _text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _number(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
