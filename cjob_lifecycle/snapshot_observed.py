"""A typed reading of everything ``plan_snapshot`` needs about one CheckpointedJobSnapshot.

The operator fills it from the snapshot object, the job it names and the snapshot's
two pods (the one that copies, the one that disposes of the copy); tests build it
directly. The decisions depend only on these values, never on the API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cjob_lifecycle.observed import PodPhase
from cjob_spec.snapshot import SnapshotSpec, SnapshotStatus
from cjob_spec.status import CheckpointRef


@dataclass(frozen=True, kw_only=True)
class SnapshotJob:
    """The CheckpointedJob the snapshot names, as far as a copy needs it."""

    uid: str
    spec: Mapping[str, Any]
    """The job's spec as stored: what a snapshot pod is built from."""
    store: str
    """The job's checkpoint store (its ConfigMap), where the copy's hold is kept."""
    checkpoints: tuple[CheckpointRef, ...] = ()
    """The checkpoints the store retains, oldest first (none while it has no store):
    the store, not the job's status, which may lag behind a pruned checkpoint."""
    held: int | None = None
    """The checkpoint this snapshot holds in the store (pruning skips it), if any."""

    @property
    def latest(self) -> CheckpointRef | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def retained(self, checkpoint_id: int) -> CheckpointRef | None:
        return next((ref for ref in self.checkpoints if ref.id == checkpoint_id), None)


@dataclass(frozen=True, kw_only=True)
class SnapshotPod(PodPhase):
    """A snapshot pod; ``message`` is its termination message (the outcome's JSON, or
    the end of its log should it die before writing one)."""

    name: str
    phase: str
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    deletion_timestamp: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class SnapshotObserved:
    name: str
    uid: str
    generation: int | None
    spec: SnapshotSpec | None
    """``None`` when the object's spec is invalid (``spec_error`` says why)."""
    spec_error: str | None = None
    status: SnapshotStatus
    deleting: bool = False
    job: SnapshotJob | None = None
    """``None``: no CheckpointedJob of that name."""
    take_pod: SnapshotPod | None = None
    dispose_pod: SnapshotPod | None = None
