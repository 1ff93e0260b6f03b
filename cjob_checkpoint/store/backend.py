"""Where a completed-checkpoint store keeps its state: read it, swap it, nothing else.

This is the shape of Flink's ``StateHandleStore`` under its
``DefaultCompletedCheckpointStore``: the backend (memory, files, a ConfigMap)
offers one consistent :meth:`StoreBackend.read` and one
:meth:`StoreBackend.compare_and_swap`; everything a store decides is written
once above it. :func:`update_state` is the read-change-swap loop every write
goes through: a lost swap (somebody wrote first) or a failure that certainly
wrote nothing is retried from a fresh read, within a bounded number of tries
and a deadline, with jittered backoff.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from cjob_checkpoint.store.completed_store import AmbiguousWriteError, StoreError
from cjob_checkpoint.store.state import StoreDraft, StoreState

__all__ = [
    "RetryPolicy",
    "StoreBackend",
    "SwapConflictError",
    "TransientStoreError",
    "retrying",
    "update_state",
]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

Change = Callable[[StoreDraft], bool]
"""Edits a draft in place and says whether there is anything to write; may raise to
abort (a fence check, a size budget). It runs again on every fresh read."""


class SwapConflictError(Exception):
    """The state changed since it was read; nothing was written. Read again."""


class TransientStoreError(Exception):
    """Nothing was written, but the backend is unwell; retry after a pause."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How long one operation (a read, or a read-change-swap) may keep retrying."""

    max_attempts: int = 20
    deadline: float = 60.0
    """Seconds; no try starts after it, so a hung backend becomes an answer."""


class StoreBackend(Protocol):
    """Reads and swaps a store's whole :class:`StoreState`."""

    @property
    def retry_policy(self) -> RetryPolicy:
        """How long one operation may keep retrying."""
        ...

    def read(self) -> StoreState:
        """One reading; raises :class:`TransientStoreError` when it may be retried."""
        ...

    def compare_and_swap(self, *, expected: StoreState, new: StoreState,
                         operation: str) -> StoreState:
        """Replace ``expected`` by ``new`` atomically and return what was written.

        Raises :class:`SwapConflictError` if the stored version is no longer
        ``expected.version``, :class:`TransientStoreError` if nothing was written,
        and :class:`AmbiguousWriteError` when the write may or may not have landed.
        """
        ...

    def locate(self, checkpoint_id: int) -> str:
        """Where the pointer of ``checkpoint_id`` is kept, for error messages."""
        ...

    def check_budget(self, state: StoreState) -> None:
        """Raise :class:`~cjob_checkpoint.store.completed_store.StoreFullError` if ``state`` is too big."""
        ...

    def gave_up(self, *, operation: str, conflicts: bool, attempts: int,
                cause: str) -> StoreError:
        """The error for an operation that ran out of tries."""
        ...


def _backoff(attempt: int) -> None:
    """Full-jitter exponential backoff: 20 ms doubling, at most half a second."""
    time.sleep(random.uniform(0.0, min(0.5, 0.02 * (2 ** min(attempt, 8)))))


def retrying(
    step: Callable[[], _T],
    *,
    policy: RetryPolicy,
    operation: str,
    where: str,
    gave_up: Callable[..., Exception],
) -> _T:
    """Run ``step`` until it neither conflicts nor meets a transient failure.

    At most ``policy.max_attempts`` tries, and none starts after
    ``policy.deadline`` seconds. Then ``gave_up(operation=, conflicts=, attempts=,
    cause=)`` names the failure.
    """
    last_cause = ""
    started = time.monotonic()
    attempts = 0
    for attempt in range(policy.max_attempts):
        if attempt and time.monotonic() - started >= policy.deadline:
            break
        attempts += 1
        try:
            return step()
        except SwapConflictError:
            last_cause = "conflict"
        except TransientStoreError as exc:
            last_cause = exc.cause
            _log.info("%s of %s: %s; retrying", operation, where, exc.cause)
        _backoff(attempt)
    raise gave_up(operation=operation, conflicts=last_cause == "conflict", attempts=attempts,
                  cause=last_cause)


def read_state(backend: StoreBackend, *, where: str) -> StoreState:
    """One consistent reading, retrying transient failures."""
    return retrying(backend.read, policy=backend.retry_policy, operation="read", where=where,
                    gave_up=backend.gave_up)


def update_state(
    backend: StoreBackend,
    change: Change,
    *,
    operation: str,
    where: str,
    retry_ambiguous: bool = False,
) -> StoreState:
    """Read, change, compare-and-swap; again from a fresh read when the swap loses.

    Returns the state as written (or as read, when ``change`` found nothing to
    do). An ambiguous write raises :class:`AmbiguousWriteError` unless
    ``retry_ambiguous``: only safe for changes that decide again from the fresh
    read (an increment, an equal-or-replace).
    """

    def step() -> StoreState:
        current = backend.read()
        draft = current.draft()
        if not change(draft):
            return current
        try:
            return backend.compare_and_swap(expected=current, new=draft.freeze(),
                                            operation=operation)
        except AmbiguousWriteError as exc:
            if not retry_ambiguous:
                raise
            raise TransientStoreError(str(exc)) from None

    return retrying(step, policy=backend.retry_policy, operation=operation, where=where,
                    gave_up=backend.gave_up)
