"""Whether a checkpoint's state fits the pipeline that restores it.

Keyed state is handed to operators by uid. An operator renamed (or given another
default name by an operator inserted before it) or removed leaves its state with
nobody: the job would run on with that state silently gone. One whose kind, key or
state layout changed would read the state as something it is not. Before the driver
runs anything it compares what the checkpoint holds with the new pipeline; each
mismatch is an :class:`Incompatibility`, and any of them fails the attempt with
``IncompatibleState`` unless ``spec.restore.allowNonRestoredState`` lets it drop
that state (:func:`without`), which the restore report then lists.

A checkpoint written before ``_metadata`` described its operators (version 4) is
compared by uid only. New operators, and operators that held no state, are no
mismatch: they start empty either way.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from cjob_checkpoint.metadata import CheckpointMetadata, OperatorDescriptor


class StateChange(enum.StrEnum):
    """How the pipeline differs from what the checkpoint's state was written for."""

    UNMAPPED = "unmapped"
    """The checkpoint holds state of an operator the pipeline no longer has."""
    KIND = "kind"
    KEY = "key"
    LAYOUT = "layout"
    """The aggregates or the window the operator's state is laid out by."""
    IN_FLIGHT = "in-flight"
    """Records in flight into a stage (unaligned) whose operator is another now."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Incompatibility:
    change: StateChange
    operator: str
    """The operator's uid (``stage <n>`` for in-flight data)."""
    was: str
    now: str

    def describe(self) -> str:
        match self.change:
            case StateChange.UNMAPPED:
                return (f"operator {self.operator!r}{self.was} holds state, but the job has no "
                        f"operator of that name (its stateful operators: {self.now})")
            case StateChange.KIND:
                return f"operator {self.operator!r} changed kind from {self.was} to {self.now}"
            case StateChange.KEY:
                return f"operator {self.operator!r} changed its key from {self.was} to {self.now}"
            case StateChange.LAYOUT:
                return (f"operator {self.operator!r} changed its state layout from {self.was} "
                        f"to {self.now}")
            case StateChange.IN_FLIGHT:
                return (f"{self.operator} has records in flight into {self.was}, but its "
                        f"operator is now {self.now}")


def incompatibilities(metadata: CheckpointMetadata,
                      pipeline: Sequence[OperatorDescriptor]) -> list[Incompatibility]:
    """Every way ``metadata``'s state does not fit ``pipeline`` (empty: it fits)."""
    new = {op.uid: op for op in pipeline}
    old = None if metadata.pipeline is None else {op.uid: op for op in metadata.pipeline}
    names = ", ".join(repr(uid) for uid in new) or "none"
    found: list[Incompatibility] = []
    for uid in sorted(uid for uid, handles in metadata.operators.items() if handles):
        before = None if old is None else old.get(uid)
        after = new.get(uid)
        if after is None:
            kind = "" if before is None else f" ({before.kind})"
            found.append(Incompatibility(change=StateChange.UNMAPPED, operator=uid, was=kind,
                                         now=names))
        elif before is not None:
            found.extend(_changed(before, after))
    found.extend(_moved_in_flight(metadata, old=old, new=new))
    return found


def _changed(before: OperatorDescriptor, after: OperatorDescriptor) -> list[Incompatibility]:
    changes = []
    for change, was, now in ((StateChange.KIND, before.kind, after.kind),
                             (StateChange.KEY, before.key, after.key),
                             (StateChange.LAYOUT, before.state, after.state)):
        if was != now:
            changes.append(Incompatibility(change=change, operator=before.uid,
                                           was=was or "nothing", now=now or "nothing"))
    return changes


def _moved_in_flight(metadata: CheckpointMetadata, *, old: dict[str, OperatorDescriptor] | None,
                     new: dict[str, OperatorDescriptor]) -> list[Incompatibility]:
    """In-flight data is kept per stage; it belongs to the operator that stage had."""
    if not any(metadata.channels.values()):
        return []
    new_by_stage = {op.stage: op.uid for op in new.values()}
    old_by_stage = None if old is None else {op.stage: op.uid for op in old.values()}
    found = []
    for stage in sorted(s for s, handles in metadata.channels.items() if handles):
        now = new_by_stage.get(stage)
        was = None if old_by_stage is None else old_by_stage.get(stage)
        if now is None or (old_by_stage is not None and was != now):
            found.append(Incompatibility(
                change=StateChange.IN_FLIGHT, operator=f"stage {stage}",
                was="its operator" if was is None else repr(was),
                now="none" if now is None else repr(now)))
    return found


def without(metadata: CheckpointMetadata,
            dropped: Sequence[Incompatibility]) -> CheckpointMetadata:
    """``metadata`` without the state ``dropped`` names: those operators (and the
    stages whose in-flight data has no operator to go to) start empty."""
    operators = {f.operator for f in dropped if f.change is not StateChange.IN_FLIGHT}
    stages = {int(f.operator.removeprefix("stage ")) for f in dropped
              if f.change is StateChange.IN_FLIGHT}
    return dataclasses.replace(
        metadata,
        operators={uid: h for uid, h in metadata.operators.items() if uid not in operators},
        channels={stage: h for stage, h in metadata.channels.items() if stage not in stages})
