"""What a snapshot pod reports to the operator: its container's termination message.

The operator never reaches a job's storage (it holds neither the credentials nor the
volumes), so a CheckpointedJobSnapshot is taken, and disposed of, by a short-lived
pod that reaches it as the job's driver does. The pod's one result crosses a process
boundary in the only channel Kubernetes gives a finished container, its termination
message (at most 4096 bytes): a versioned JSON object, written whole, that the
operator reads from the pod's status. A message that is not one (the container died
before writing it, and Kubernetes fell back to the end of its log) is not half-read:
the operator quotes it as the failure's reason.
"""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Any

from cjob_spec.versioned import versioned_body

FORMAT_VERSION = 1


class SnapshotOutcomeError(ValueError):
    """A termination message that is no snapshot outcome; the message says why."""


class SnapshotTask(Enum):
    """What the pod was asked to do."""

    TAKE = "Take"
    DISPOSE = "Dispose"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SnapshotOutcome:
    """One snapshot pod's result: ``error`` is ``None`` on success.

    For :attr:`SnapshotTask.TAKE`, ``path`` is the snapshot's ``_metadata``,
    ``checkpoint_id`` the checkpoint copied, ``files`` and ``size_bytes`` what the copy
    holds. For :attr:`SnapshotTask.DISPOSE`, ``files`` is how many were deleted.
    """

    task: SnapshotTask
    error: str | None = None
    path: str | None = None
    checkpoint_id: int | None = None
    files: int = 0
    size_bytes: int = 0

    @property
    def succeeded(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"version": FORMAT_VERSION, "task": self.task.value,
                                "files": self.files, "sizeBytes": self.size_bytes}
        if self.error is not None:
            body["error"] = self.error
        if self.path is not None:
            body["path"] = self.path
        if self.checkpoint_id is not None:
            body["checkpointId"] = self.checkpoint_id
        return body

    def to_message(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, data: object) -> SnapshotOutcome:
        body = versioned_body(data, what="snapshot outcome", version=FORMAT_VERSION,
                              error=SnapshotOutcomeError)
        try:
            task = SnapshotTask(body.get("task"))
        except ValueError:
            raise SnapshotOutcomeError(
                f"snapshot outcome: task must be one of "
                f"{', '.join(t.value for t in SnapshotTask)}, got {body.get('task')!r}") from None
        error = _optional(body, "error", str)
        path = _optional(body, "path", str)
        checkpoint_id = _optional(body, "checkpointId", int)
        files = _optional(body, "files", int) or 0
        size_bytes = _optional(body, "sizeBytes", int) or 0
        if error is None and task is SnapshotTask.TAKE and (path is None or checkpoint_id is None):
            raise SnapshotOutcomeError("snapshot outcome: a snapshot taken names its path and "
                                       "checkpointId")
        return cls(task=task, error=error, path=path, checkpoint_id=checkpoint_id, files=files,
                   size_bytes=size_bytes)

    @classmethod
    def from_message(cls, message: str) -> SnapshotOutcome:
        """Parse a termination message; raises :class:`SnapshotOutcomeError`."""
        try:
            data = json.loads(message)
        except ValueError:
            raise SnapshotOutcomeError("snapshot outcome: not JSON") from None
        return cls.from_json(data)


def _optional(body: dict[str, Any], key: str, kind: type) -> Any:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise SnapshotOutcomeError(f"snapshot outcome: {key} must be a {kind.__name__}, "
                                   f"got {value!r}")
    if isinstance(value, int) and value < 0:
        raise SnapshotOutcomeError(f"snapshot outcome: {key} must not be negative")
    return value
