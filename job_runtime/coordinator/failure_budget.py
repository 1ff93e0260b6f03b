"""How many checkpoints in a row may fail before the job does (``tolerableFailures``).

Flink's ``CheckpointFailureManager``, reduced to what the spec offers: a count of
consecutive failed checkpoints (declines, timeouts, failed commits and triggers
that could not get an id); one completed checkpoint resets it. Failures that say
nothing about the job's checkpointing (a checkpoint subsumed by a newer one, or
aborted because the subtasks restarted) are not counted by the caller.
"""

from __future__ import annotations

from job_runtime.errors import CheckpointFailureBudgetExceeded


class FailureBudget:
    def __init__(self, *, tolerable: int) -> None:
        self.tolerable = tolerable
        self.consecutive = 0

    def succeeded(self) -> None:
        self.consecutive = 0

    def failed(self, *, reason: str) -> CheckpointFailureBudgetExceeded | None:
        """Count one failure; the error that must end the job once the budget is spent."""
        self.consecutive += 1
        if self.consecutive <= self.tolerable:
            return None
        return CheckpointFailureBudgetExceeded(failures=self.consecutive,
                                               tolerable=self.tolerable, last_reason=reason)
