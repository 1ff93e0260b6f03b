"""Why a checkpoint failed: Flink's ``CheckpointFailureReason``, for this coordinator.

Every failed checkpoint has exactly one reason, so the rule that decides whether
it counts against ``tolerableFailures`` is written once, over the whole enum, in
:mod:`job_runtime.coordinator.failure_budget`, and a new reason cannot be added
without deciding it there.

The enum names the kind of failure only. The text that logs, the status file,
the ``Abort`` message and a job's failure carry is the message the coordinator
composes beside it, unchanged by this classification.
"""

from __future__ import annotations

import enum


class AbortReason(enum.Enum):
    TRIGGER_FAILED = "trigger failed"
    """No checkpoint id could be had from the store's counter: the checkpoint never
    started, yet it is a checkpoint the job failed to take."""

    EXPIRED = "expired"
    """Not every task acknowledged within the checkpoint timeout."""

    DECLINED = "declined"
    """A task could not take its snapshot (an upload failed, say)."""

    DECLINED_SUBSUMED = "declined subsumed"
    """A task dropped the checkpoint because a newer barrier overtook it."""

    SUBSUMED = "subsumed"
    """A newer checkpoint completed first."""

    SUBTASKS_RESTARTED = "subtasks restarted"
    """Spark relaunched the barrier stage: every pending checkpoint of the old epoch goes."""

    STALE_SHARED_FILES = "stale shared files"
    """The snapshot reuses a shared file deleted with an older checkpoint: it would
    not restore."""

    COMMIT_FAILED = "commit failed"
    """``_metadata`` was not written, or the store refused the pointer; nothing was
    committed."""

    STORE_WRITE_AMBIGUOUS = "store write ambiguous"
    """The store cannot tell whether the pointer landed."""

    STORE_FAILED = "store failed"
    """The store failed, possibly after committing the pointer."""
