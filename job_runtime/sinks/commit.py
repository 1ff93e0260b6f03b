"""Committing a checkpoint's transactions: when a failure may wait and when it may not.

A commit that fails after an ordinary checkpoint stays pending: the next completed
checkpoint commits it again (commits are idempotent). After the *final*
checkpoint there is no next one, and the driver removes the staging area once
the job ends, so a failure there must never be swallowed. The final commit is
retried with exponential backoff (transient outages of an object store last
seconds) and then raises :class:`SinkCommitError`, which fails the attempt: the
restart restores the final checkpoint, whose pending transactions are committed
again before the job may end.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from job_runtime.errors import RuntimeJobError
from job_runtime.sinks.failures import SinkFailedError

log = logging.getLogger(__name__)


class SinkCommitError(RuntimeJobError):
    """A transaction that must be committed now could not be committed."""

    def __init__(self, *, checkpoint_id: int, target: str, cause: str) -> None:
        super().__init__(f"commit of checkpoint {checkpoint_id} to {target} failed: {cause}")
        self.checkpoint_id = checkpoint_id
        self.target = target
        self.cause = cause

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructors do not survive the default exception pickling,
        # and Spark carries a failed task's error to the driver pickled.
        return (_rebuild_commit_error, (self.checkpoint_id, self.target, self.cause))


def _rebuild_commit_error(checkpoint_id: int, target: str, cause: str) -> SinkCommitError:
    return SinkCommitError(checkpoint_id=checkpoint_id, target=target, cause=cause)


class LostTransactionError(RuntimeJobError):
    """A restored checkpoint's pending transaction has neither staged nor final data.

    The checkpoint promised these records to the output; continuing would silently
    drop them, so the restore fails instead of logging.
    """

    def __init__(self, *, checkpoint_id: int, staging: str, final: str) -> None:
        super().__init__(f"pending transaction of checkpoint {checkpoint_id} was lost: "
                         f"neither staging {staging} nor final {final} exists")
        self.checkpoint_id = checkpoint_id
        self.staging = staging
        self.final = final

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_lost, (self.checkpoint_id, self.staging, self.final))


def _rebuild_lost(checkpoint_id: int, staging: str, final: str) -> LostTransactionError:
    return LostTransactionError(checkpoint_id=checkpoint_id, staging=staging, final=final)


class SinkFencedError(RuntimeJobError):
    """The system written to refused this writer for good: another writer took over its
    identity (a Kafka transactional id), so this one is a zombie of an older attempt.
    Never retried, never swallowed: the subtask must stop."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"the sink was fenced by a newer writer: {detail}")
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (SinkFencedError, (self.detail,))


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommitRetry:
    """How long a commit that may not be postponed keeps trying (about a minute)."""

    attempts: int = 8
    first_delay: float = 0.5
    max_delay: float = 15.0

    def delays(self) -> list[float]:
        """The pauses between attempts: doubling from ``first_delay`` up to ``max_delay``."""
        return [min(self.first_delay * 2 ** i, self.max_delay)
                for i in range(max(0, self.attempts - 1))]


def commit_with_retry(commit: Callable[[], None], *, retry: CommitRetry, checkpoint_id: int,
                      target: str, sleep: Callable[[float], None] = time.sleep) -> None:
    """Run ``commit`` until it succeeds; raise :class:`SinkCommitError` when out of attempts.

    A :class:`LostTransactionError` is not retried: missing data does not come back;
    nor is a :class:`SinkFencedError`: a zombie does not become current by trying; nor a
    :class:`~job_runtime.sinks.failures.SinkFailedError`: a refused record stays refused.
    """
    delays = retry.delays()
    for attempt in range(len(delays) + 1):
        try:
            commit()
            return
        except (LostTransactionError, SinkFencedError, SinkFailedError):
            raise
        except Exception as exc:
            if attempt == len(delays):
                raise SinkCommitError(checkpoint_id=checkpoint_id, target=target,
                                      cause=f"{type(exc).__name__}: {exc}") from exc
            log.warning("commit of %s (checkpoint %d) failed, retrying in %.1fs: %s",
                        target, checkpoint_id, delays[attempt], exc)
            sleep(delays[attempt])
