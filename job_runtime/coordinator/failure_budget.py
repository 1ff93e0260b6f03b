"""How many checkpoints in a row may fail before the job does (``tolerableFailures``).

Flink's ``CheckpointFailureManager``, reduced to what the spec offers: a count of
consecutive failed checkpoints; one completed checkpoint resets it. Which failures
count is decided here, once per :class:`AbortReason`, rather than by each caller:
declines, timeouts, failed commits and triggers that could not get an id count;
failures that say nothing about the job's checkpointing (a checkpoint subsumed by a
newer one, or aborted because the subtasks restarted) do not.
"""

from __future__ import annotations

from typing import assert_never

from job_runtime.coordinator.abort_reason import AbortReason
from job_runtime.errors import CheckpointFailureBudgetExceeded


def counts(reason: AbortReason) -> bool:
    """Whether a checkpoint that failed for ``reason`` counts against the budget."""
    match reason:
        case (AbortReason.TRIGGER_FAILED | AbortReason.EXPIRED | AbortReason.DECLINED
              | AbortReason.STALE_SHARED_FILES | AbortReason.COMMIT_FAILED
              | AbortReason.STORE_WRITE_AMBIGUOUS | AbortReason.STORE_FAILED):
            return True
        case AbortReason.SUBSUMED | AbortReason.DECLINED_SUBSUMED | AbortReason.SUBTASKS_RESTARTED:
            return False
        case _:
            assert_never(reason)


class FailureBudget:
    def __init__(self, *, tolerable: int) -> None:
        self.tolerable = tolerable
        self.consecutive = 0

    def succeeded(self) -> None:
        self.consecutive = 0

    def failed(self, *, reason: AbortReason,
               message: str) -> CheckpointFailureBudgetExceeded | None:
        """Count one failure if its reason counts; the error that must end the job once
        the budget is spent (``message``, the failure's text, becomes its last reason)."""
        if not counts(reason):
            return None
        self.consecutive += 1
        if self.consecutive <= self.tolerable:
            return None
        return CheckpointFailureBudgetExceeded(failures=self.consecutive,
                                               tolerable=self.tolerable, last_reason=message)
