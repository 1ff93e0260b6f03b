"""Which retained checkpoints someone outside the job is reading: holds on pruning.

A snapshot copies one completed checkpoint while the job keeps running, and the
job prunes every checkpoint beyond ``checkpoint.retained`` as soon as a newer one
completes. A copy that takes longer than ``retained`` checkpoint intervals (a
large state to S3, a pod that starts slowly on a busy node) would lose its source
half way. So the copier first records a *hold* in the store, in a swap that
succeeds only while the checkpoint is still live; the store's pruning skips held
checkpoints, and the holder releases its hold when it is done. A held checkpoint
stays a retained checkpoint in every other respect (its shared files stay
referenced), and the next prune after the release removes it.

Holds are not fenced: the holder is not an attempt of the job, and a new attempt
must keep what an older one promised not to delete. The record crosses process
boundaries (the operator writes, drivers read), so it is typed and versioned::

    {"version": 1, "holds": {"<holder uid>": {"checkpoint": 42, "by": "snapshot nightly"}}}

A reader that meets a document it cannot read prunes nothing rather than guess
(:class:`UnreadableHoldsError`): a guess could delete what a copy is reading.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

from cjob_checkpoint.store.completed_store import StoreError
from cjob_spec.versioned import versioned_body

HOLDS_VERSION = 1

__all__ = [
    "HOLDS_VERSION",
    "CheckpointHold",
    "CheckpointHolds",
    "UnreadableHoldsError",
]


class UnreadableHoldsError(StoreError, ValueError):
    """The recorded holds are not a document this version reads; never overwritten."""

    reason = "UnreadableHolds"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointHold:
    """``holder`` keeps checkpoint ``checkpoint_id`` from being pruned; ``by`` says who,
    in words, for ``kubectl describe`` and logs."""

    holder: str
    checkpoint_id: int
    by: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointHolds:
    """Every hold on a store's checkpoints, one per holder."""

    holds: Mapping[str, CheckpointHold] = dataclasses.field(default_factory=dict)
    version: int = HOLDS_VERSION

    def held_ids(self) -> frozenset[int]:
        return frozenset(hold.checkpoint_id for hold in self.holds.values())

    def of(self, holder: str) -> CheckpointHold | None:
        return self.holds.get(holder)

    def with_hold(self, hold: CheckpointHold) -> CheckpointHolds:
        """These holds with ``hold`` replacing whatever its holder held before."""
        return dataclasses.replace(self, holds={**self.holds, hold.holder: hold})

    def without(self, holder: str) -> CheckpointHolds:
        return dataclasses.replace(
            self, holds={name: hold for name, hold in self.holds.items() if name != holder})

    def encode(self) -> str | None:
        """The document, or ``None`` when nothing is held (the key then goes)."""
        if not self.holds:
            return None
        return json.dumps(
            {"version": self.version,
             "holds": {holder: {"checkpoint": hold.checkpoint_id, "by": hold.by}
                       for holder, hold in self.holds.items()}},
            sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str | None) -> CheckpointHolds:
        """The holds ``text`` records; ``None`` (nothing recorded) holds nothing."""
        if text is None:
            return cls()
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UnreadableHoldsError(f"checkpoint holds: not JSON: {exc}") from None
        body = versioned_body(data, what="checkpoint holds", version=HOLDS_VERSION,
                              error=UnreadableHoldsError)
        entries = body.get("holds")
        if not isinstance(entries, Mapping):
            raise UnreadableHoldsError("checkpoint holds: holds is not an object")
        return cls(holds={str(holder): _entry(str(holder), entry)
                          for holder, entry in entries.items()})


def _entry(holder: str, entry: object) -> CheckpointHold:
    if not isinstance(entry, Mapping):
        raise UnreadableHoldsError(f"checkpoint hold of {holder!r}: not an object")
    checkpoint_id, by = entry.get("checkpoint"), entry.get("by")
    if not isinstance(checkpoint_id, int) or isinstance(checkpoint_id, bool) \
            or checkpoint_id < 0:
        raise UnreadableHoldsError(
            f"checkpoint hold of {holder!r}: checkpoint {checkpoint_id!r} is not a number >= 0")
    return CheckpointHold(holder=holder, checkpoint_id=checkpoint_id,
                          by=by if isinstance(by, str) else "")
