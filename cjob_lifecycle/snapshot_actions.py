"""What ``plan_snapshot`` asks the operator to do, as data; the executor handles each kind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cjob_lifecycle.actions import EventType
from cjob_spec.snapshot_outcome import SnapshotTask


@dataclass(frozen=True)
class CreateSnapshotPod:
    """Create pod ``name`` doing ``task`` on the snapshot directory ``target``, built
    from the job's spec ``job_spec`` (its image, volumes and S3 settings) as the job's
    cleanup pod is; ``checkpoint`` is the ``_metadata`` to copy (``TAKE`` only).
    AlreadyExists is success (the name is deterministic)."""

    name: str
    task: SnapshotTask
    target: str
    job_name: str
    job_uid: str
    job_spec: Mapping[str, Any]
    checkpoint: str | None = None


@dataclass(frozen=True)
class DeleteSnapshotPod:
    """Delete a snapshot pod: a copy to try again, or one to stop before disposing."""

    name: str


@dataclass(frozen=True)
class EmitSnapshotEvent:
    type: EventType
    reason: str
    message: str


@dataclass(frozen=True)
class HoldCheckpoint:
    """Keep checkpoint ``checkpoint_id`` in the job's store ``store`` from being pruned
    while the snapshot ``holder`` (its uid) copies it. The store refuses a checkpoint
    already pruned; the next pass then sees no hold and picks again."""

    store: str
    checkpoint_id: int
    holder: str
    by: str


@dataclass(frozen=True)
class ReleaseCheckpoint:
    """Let go of the snapshot's hold: the copy is over, or will not happen."""

    store: str
    holder: str


@dataclass(frozen=True)
class ReleaseSnapshot:
    """Deletion is complete: let the CheckpointedJobSnapshot go (remove the finalizer)."""


SnapshotAction = (CreateSnapshotPod | DeleteSnapshotPod | EmitSnapshotEvent | HoldCheckpoint
                  | ReleaseCheckpoint | ReleaseSnapshot)
