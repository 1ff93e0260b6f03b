"""What a driver restored, as it records it in the store for the operator to read.

The operator starts an attempt with a *request* (``latest``, an id, a path); only the
driver knows what it restored, because it may find the newest checkpoint unreadable
and fall back to an older one (``spec.restore.onUnreadable: FallbackToPrevious``). So
after resolving its restore point, the driver writes this report for its attempt, and
the operator turns it into ``status.restoredFrom`` (and an Event on a fallback).

The report crosses a process (and image version) boundary, so it is typed and
versioned JSON::

    {"version": 1, "attempt": 3, "id": 41, "path": ".../chk-41/_metadata",
     "fallbackFrom": {"id": 42, "path": ".../chk-42/_metadata"}}

``id`` and ``path`` are ``null`` for an empty start; ``fallbackFrom`` is ``null``
unless a newer checkpoint was skipped as unreadable. Version 2 adds ``dropped``: the
state the driver left out because the pipeline no longer maps it
(``spec.restore.allowNonRestoredState``), one sentence per operator; a report without
any is still written as version 1, which every reader knows. A reader that meets
another version refuses it (:class:`UnreadableRestoreReportError`) rather than
guessing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, TypeGuard

RESTORE_REPORT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MAX_REPORT_BYTES = 4096
"""A report is a few hundred bytes; the cap keeps it far below the ConfigMap's 1 MiB
even for absurd paths, and a report over it is not written."""

__all__ = [
    "MAX_REPORT_BYTES",
    "RESTORE_REPORT_VERSION",
    "RestoreReport",
    "RestoredCheckpoint",
    "UnreadableRestoreReportError",
]


DROPPED_BYTES = 2048
"""At most this much of a report lists dropped state, so that a pipeline that changed a
hundred operators still leaves a report under :data:`MAX_REPORT_BYTES`."""


def clip_dropped(sentences: tuple[str, ...]) -> tuple[str, ...]:
    """``sentences`` as many as fit :data:`DROPPED_BYTES`, then how many more there are."""
    kept: list[str] = []
    used = 0
    for i, sentence in enumerate(sentences):
        size = len(sentence.encode()) + 4
        if used + size > DROPPED_BYTES:
            kept.append(f"and {len(sentences) - i} more")
            break
        kept.append(sentence)
        used += size
    return tuple(kept)


class UnreadableRestoreReportError(ValueError):
    """The recorded report is not a report this version understands."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoredCheckpoint:
    """A checkpoint named by id and ``_metadata`` path."""

    id: int
    path: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.path}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoreReport:
    """What attempt ``attempt`` restored; ``checkpoint`` is ``None`` for an empty start."""

    attempt: int
    checkpoint: RestoredCheckpoint | None
    fallback_from: RestoredCheckpoint | None = None
    """The newer checkpoint that was skipped because it could not be read."""
    dropped: tuple[str, ...] = ()
    """The state left out because the pipeline no longer maps it, one sentence each."""

    @property
    def fell_back(self) -> bool:
        return self.fallback_from is not None

    def to_json(self) -> str:
        document: dict[str, Any] = {
            "version": RESTORE_REPORT_VERSION if self.dropped else 1,
            "attempt": self.attempt,
            "id": None if self.checkpoint is None else self.checkpoint.id,
            "path": None if self.checkpoint is None else self.checkpoint.path,
            "fallbackFrom": None if self.fallback_from is None else self.fallback_from.to_dict(),
        }
        if self.dropped:
            document["dropped"] = list(self.dropped)
        return json.dumps(document, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RestoreReport:
        """Decode a report; anything but a well-formed report of a known version is refused."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UnreadableRestoreReportError(f"not JSON: {exc}") from None
        if not isinstance(data, Mapping):
            raise UnreadableRestoreReportError("not a JSON object")
        version = data.get("version")
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            raise UnreadableRestoreReportError(
                f"version {version!r} is not one of the supported "
                f"{', '.join(map(str, READABLE_VERSIONS))}")
        attempt = data.get("attempt")
        if not _is_count(attempt):
            raise UnreadableRestoreReportError(f"attempt {attempt!r} is not a number >= 0")
        checkpoint = None if data.get("id") is None and data.get("path") is None else \
            _checkpoint(data, what="the restored checkpoint")
        fallback = data.get("fallbackFrom")
        if fallback is not None and not isinstance(fallback, Mapping):
            raise UnreadableRestoreReportError("fallbackFrom is not an object")
        dropped = data.get("dropped", [])
        if not isinstance(dropped, list) or not all(isinstance(d, str) for d in dropped):
            raise UnreadableRestoreReportError("dropped is not a list of sentences")
        return cls(attempt=attempt, checkpoint=checkpoint,
                   fallback_from=None if fallback is None else
                   _checkpoint(fallback, what="fallbackFrom"),
                   dropped=tuple(dropped))


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _checkpoint(data: Mapping[str, Any], *, what: str) -> RestoredCheckpoint:
    checkpoint_id, path = data.get("id"), data.get("path")
    if not _is_count(checkpoint_id) or not isinstance(path, str) or not path:
        raise UnreadableRestoreReportError(
            f"{what} needs an id >= 0 and a path, got {checkpoint_id!r} and {path!r}")
    return RestoredCheckpoint(id=checkpoint_id, path=path)
