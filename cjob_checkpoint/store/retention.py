"""Retention rules shared by the store implementations."""

from __future__ import annotations

from typing import Any

from cjob_checkpoint.store.base import StoreError


class InvalidRetentionError(StoreError):
    """``retained`` must keep at least the newest checkpoint."""

    reason = "InvalidRetention"

    def __init__(self, *, retained: object) -> None:
        super().__init__(f"retained must be an int >= 1, got {retained!r}")
        self.retained = retained

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.retained,))


def _rebuild(retained: object) -> InvalidRetentionError:
    return InvalidRetentionError(retained=retained)


def ensure_retained(retained: int) -> int:
    """Return ``retained`` if it keeps at least one checkpoint, else raise."""
    if isinstance(retained, bool) or not isinstance(retained, int) or retained < 1:
        raise InvalidRetentionError(retained=retained)
    return retained


def ids_to_prune(ids: list[int], *, retained: int) -> list[int]:
    """The ids beyond the ``retained`` newest, oldest first; never the newest."""
    ordered = sorted(ids)
    return ordered[: max(0, len(ordered) - retained)]
