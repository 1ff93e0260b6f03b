"""The fallback walk: the first checkpoint, newest first, whose ``_metadata`` reads.

Written once and used twice: by the store's :meth:`latest_restorable` (what the
operator and tests ask of a store) and by the driver's restore resolution, which
walks the store's pointers after a requested checkpoint that may not be in the
store at all (an id or a path given in ``spec.restore.from``).

Only :class:`UnreadableCheckpointError` (a missing, empty or damaged file, or a
damaged pointer) is a reason to fall back. A storage outage or denied access
propagates: it says nothing about the checkpoint, and an older one would not be
any easier to read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from cjob_checkpoint.store.completed_store import (
    CompletedCheckpoint,
    CorruptPointerError,
    NoRestorableCheckpointError,
    UnreadableCheckpointError,
)

MetadataReader = Callable[[str], object]
"""Reads a checkpoint's ``_metadata`` by URI; raises :class:`UnreadableCheckpointError`."""

Candidate = CompletedCheckpoint | CorruptPointerError
"""A pointer as the store holds it: decoded, or the reason it cannot be."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Restorable:
    """The checkpoint chosen (``None``: there was none to try), what its reader
    returned, and every candidate passed over on the way, newest first."""

    checkpoint: CompletedCheckpoint | None
    metadata: object = None
    skipped: tuple[UnreadableCheckpointError, ...] = ()

    @property
    def notes(self) -> list[str]:
        """One sentence per skipped candidate, for the log, the status and an Event."""
        return [f"checkpoint {problem.checkpoint_id} is unreadable ({problem.cause}); "
                f"falling back to an older one" for problem in self.skipped]


def first_readable(candidates: Iterable[Candidate], *, read: MetadataReader,
                   fallback: bool) -> Restorable:
    """The first candidate whose ``_metadata`` ``read`` accepts.

    Without ``fallback`` the first candidate must read, else its error is raised.
    With ``fallback`` every unreadable one is skipped; if none reads,
    :class:`NoRestorableCheckpointError` names the first, because silently
    starting from scratch would replay the whole input.
    """
    skipped: list[UnreadableCheckpointError] = []
    for candidate in candidates:
        if isinstance(candidate, CorruptPointerError):
            problem: UnreadableCheckpointError = candidate
        else:
            try:
                metadata = read(candidate.metadata_path)
            except UnreadableCheckpointError as exc:
                problem = exc
            else:
                return Restorable(checkpoint=candidate, metadata=metadata,
                                  skipped=tuple(skipped))
        if not fallback:
            raise problem
        skipped.append(problem)
    if skipped:
        first = skipped[0]
        raise NoRestorableCheckpointError(
            checkpoint_id=first.checkpoint_id, path=first.path,
            cause=f"{first.cause}; no older retained checkpoint is readable either")
    return Restorable(checkpoint=None)
