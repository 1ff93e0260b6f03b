"""What every completed-checkpoint store holds, independent of where it is kept.

A store's whole content is small (a fence, a counter, a few pointers and
markers, a restore report, the published staged inputs), so a backend reads it
as one :class:`StoreState` and writes it back as one compare-and-swap. The rules
that decide *what* to write (fencing, retention, two-phase pruning, first-wins
publication) work on a :class:`StoreDraft` and are written once, in
:mod:`cjob_checkpoint.store.backed`; the memory, file and ConfigMap backends only
know how to read and swap the state.

Pointers stay raw text here: a damaged pointer must survive a read-modify-write
untouched, and only the reader that needs it decodes it (:func:`decode_pointer`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from cjob_checkpoint.store.completed_store import CompletedCheckpoint, CorruptPointerError

__all__ = [
    "StoreDraft",
    "StoreState",
    "decode_pointer",
    "marker_text",
    "next_checkpoint_id",
]

Locate = Callable[[int], str]
"""Names where a pointer is kept (a file, a ConfigMap key), for error messages."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreState:
    """One consistent reading of a store, at one ``version``.

    ``version`` is opaque to everyone but the backend that produced it (a
    ``resourceVersion``, a digest of the files, a generation number): a swap
    expecting it fails once anybody else has written.
    """

    version: str
    fence: int = 0
    """The attempt that owns the store; older attempts may not write."""
    counter: int | None = None
    """The stored next checkpoint id, if one was ever stored."""
    pointers: Mapping[int, str] = dataclasses.field(default_factory=dict)
    """Checkpoint id -> pointer text as stored (decoded only when needed)."""
    unreadable: Mapping[int, str] = dataclasses.field(default_factory=dict)
    """Checkpoint id -> why its pointer could not even be read as text."""
    markers: Mapping[int, str] = dataclasses.field(default_factory=dict)
    """Checkpoint id -> discard marker (phase one of a two-phase prune)."""
    restore_report: str | None = None
    """The encoded :class:`~cjob_checkpoint.store.restore_report.RestoreReport`, if any."""
    staged_inputs: str | None = None
    """The encoded :class:`~cjob_checkpoint.store.staged_inputs.StagedInputs`, if any
    input was ever published (raw: an unreadable document must survive a swap)."""
    holds: str | None = None
    """The encoded :class:`~cjob_checkpoint.store.holds.CheckpointHolds`, if anything is
    held (raw, for the same reason)."""
    origin: Any = dataclasses.field(default=None, compare=False, repr=False)
    """The backend's own reading (a ConfigMap object), which its swap edits."""

    def pointer_ids(self) -> list[int]:
        """Every pointer's id, marked and damaged ones included, ascending."""
        return sorted({*self.pointers, *self.unreadable})

    def live_ids(self) -> list[int]:
        """Pointer ids not marked for discard, ascending."""
        return [i for i in self.pointer_ids() if i not in self.markers]

    def marked_pointer_ids(self) -> list[int]:
        """Ids marked for discard whose pointer still exists, ascending."""
        pointers = set(self.pointer_ids())
        return sorted(i for i in self.markers if i in pointers)

    def pointer(self, checkpoint_id: int, *, locate: Locate) -> CompletedCheckpoint:
        """Decode one pointer; raises :class:`CorruptPointerError` if it is damaged."""
        where = locate(checkpoint_id)
        if checkpoint_id in self.unreadable:
            raise CorruptPointerError(checkpoint_id=checkpoint_id, path=where,
                                      cause=self.unreadable[checkpoint_id])
        text = self.pointers.get(checkpoint_id)
        if text is None:
            raise CorruptPointerError(checkpoint_id=checkpoint_id, path=where,
                                      cause="the pointer does not exist")
        return decode_pointer(checkpoint_id, text, where=where)

    def live_pointers(self, *, locate: Locate) -> list[CompletedCheckpoint | CorruptPointerError]:
        """Every live pointer, decoded or with the reason it cannot be, oldest first."""
        result: list[CompletedCheckpoint | CorruptPointerError] = []
        for checkpoint_id in self.live_ids():
            try:
                result.append(self.pointer(checkpoint_id, locate=locate))
            except CorruptPointerError as exc:
                result.append(exc)
        return result

    def next_checkpoint_id(self, *, start: int = 1) -> int:
        return next_checkpoint_id(counter=self.counter, pointer_ids=self.pointer_ids(),
                                  start=start)

    def draft(self) -> StoreDraft:
        return StoreDraft(self)


class StoreDraft:
    """A state being changed in memory; :meth:`freeze` gives the state to swap in."""

    def __init__(self, state: StoreState) -> None:
        self.base = state
        self.fence = state.fence
        self.counter = state.counter
        self.pointers = dict(state.pointers)
        self.unreadable = dict(state.unreadable)
        self.markers = dict(state.markers)
        self.restore_report = state.restore_report
        self.staged_inputs = state.staged_inputs
        self.holds = state.holds

    def freeze(self) -> StoreState:
        return dataclasses.replace(
            self.base, fence=self.fence, counter=self.counter, pointers=dict(self.pointers),
            unreadable=dict(self.unreadable), markers=dict(self.markers),
            restore_report=self.restore_report, staged_inputs=self.staged_inputs,
            holds=self.holds)

    @property
    def state(self) -> StoreState:
        """The draft as it stands, for reads (ids, decoding)."""
        return self.freeze()

    def put_pointer(self, checkpoint: CompletedCheckpoint) -> None:
        """Add or replace a pointer; a re-added id is authoritative again, so unmarked."""
        self.pointers[checkpoint.checkpoint_id] = checkpoint.to_json()
        self.unreadable.pop(checkpoint.checkpoint_id, None)
        self.markers.pop(checkpoint.checkpoint_id, None)

    def mark(self, checkpoint_id: int, *, attempt: int, at: float) -> None:
        self.markers[checkpoint_id] = marker_text(attempt=attempt, at=at)

    def unmark(self, checkpoint_id: int) -> None:
        self.markers.pop(checkpoint_id, None)

    def remove_pointer(self, checkpoint_id: int) -> None:
        """Remove a pointer and its marker (the last phase of a discard)."""
        self.pointers.pop(checkpoint_id, None)
        self.unreadable.pop(checkpoint_id, None)
        self.markers.pop(checkpoint_id, None)


def marker_text(*, attempt: int, at: float) -> str:
    """A discard marker: who marked the pointer and when (for people reading the store)."""
    return json.dumps({"attempt": attempt, "markedAt": at}, sort_keys=True,
                      separators=(",", ":"))


def decode_pointer(checkpoint_id: int, text: str, *, where: str) -> CompletedCheckpoint:
    """The checkpoint a pointer's text names, checked against the id it is stored under."""
    try:
        checkpoint = CompletedCheckpoint.from_json(text)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise CorruptPointerError(
            checkpoint_id=checkpoint_id, path=where,
            cause=f"the value is not a valid checkpoint pointer ({detail})",
        ) from None
    if checkpoint.checkpoint_id != checkpoint_id:
        raise CorruptPointerError(
            checkpoint_id=checkpoint_id, path=where,
            cause=f"the value names checkpoint {checkpoint.checkpoint_id}",
        )
    return checkpoint


def next_checkpoint_id(*, counter: int | None, pointer_ids: list[int] | tuple[int, ...],
                       start: int = 1) -> int:
    """What the counter hands out next: never below any pointer id + 1, so losing or
    lagging the counter can never reuse an id."""
    floor = max(pointer_ids) + 1 if pointer_ids else start
    return max(start, floor, counter if counter is not None else start)
