"""Retention rules shared by the store implementations."""

from __future__ import annotations

from cjob_checkpoint.keyword_error import keyword_error
from cjob_checkpoint.store.completed_store import StoreError


@keyword_error
class InvalidRetentionError(StoreError):
    """``retained`` must keep at least the newest checkpoint."""

    reason = "InvalidRetention"
    retained: object

    def describe(self) -> str:
        return f"retained must be an int >= 1, got {self.retained!r}"


def ensure_retained(retained: int) -> int:
    """Return ``retained`` if it keeps at least one checkpoint, else raise."""
    if isinstance(retained, bool) or not isinstance(retained, int) or retained < 1:
        raise InvalidRetentionError(retained=retained)
    return retained


def ids_to_prune(ids: list[int], *, retained: int) -> list[int]:
    """The ids beyond the ``retained`` newest, oldest first; never the newest."""
    ordered = sorted(ids)
    return ordered[: max(0, len(ordered) - retained)]
