"""Exit codes of ``python -m job_runtime run`` (and ``cleanup``), shared by the runtime and its supervisors.

The driver's exit code is the only thing a supervisor (the operator or the embedded
runner) can rely on after the process is gone, so it carries the class of failure.
Codes the runtime does not choose itself (1 for an uncaught Python error, 137 for a
SIGKILL such as an OOM kill, 143 for SIGTERM) are treated as transient.

Permanent codes are failures that a restart cannot fix: the same arguments, the same
user code or the same unreadable checkpoint will fail the same way again, so
restarting only burns the restart budget and hides the real cause. They make the job
fail at once with a clear reason, whatever the restart policy says.
"""

from __future__ import annotations

from enum import IntEnum

from cjob_spec.reasons import Reason


class ExitCode(IntEnum):
    """Exit codes the runtime uses on purpose."""

    FINISHED = 0
    """The job's sources are exhausted and every checkpoint and commit is done."""
    BAD_CONFIG = 2
    """Bad command-line arguments or job configuration (permanent)."""
    USER_CODE_ERROR = 3
    """The user's build function or record functions raised (permanent)."""
    CHECKPOINT_FAILURES_EXCEEDED = 4
    """More consecutive checkpoint failures than ``tolerableFailures`` (retried)."""
    STORAGE_UNREACHABLE = 5
    """Checkpoint storage or the checkpoint store could not be reached (retried)."""
    RESTORE_FAILED = 6
    """The checkpoint to restore is unreadable or belongs to another job (permanent)."""
    CLEANUP_FAILED = 7
    """``cleanup`` could not delete the job's checkpoint directory (storage refused or
    unreachable); the data is still there."""
    SUSPENDED = 8
    """The job is suspended: its final checkpoint completed and every sink committed it.
    Not a failure: the supervisor that asked for it marks the job suspended, and one
    whose suspend was withdrawn meanwhile starts the next attempt at once."""
    FENCED = 9
    """A newer attempt took over the checkpoint store while this driver still ran: it
    stopped when it next tried to commit. Proof that the driver was alive, so a
    standby's report that it was lost was false."""
    INCOMPATIBLE_STATE = 10
    """The checkpoint holds state the job's pipeline no longer maps: an operator it has
    no more (renamed, removed) or whose kind, key or state layout changed (permanent;
    ``spec.restore.allowNonRestoredState`` drops that state instead)."""
    SINK_REJECTED = 11
    """A sink's system refused a record for good (too large, unencodable, a constraint
    violation) and the sink routes no bad records aside (permanent: the restored
    checkpoint would send the same record again)."""
    SINK_STALLED = 12
    """A sink could not deliver a completed checkpoint's output within the stall bound
    (retried: the next attempt sends it again)."""
    CHECKPOINT_STALLED = 13
    """No checkpoint completed within the health window while the job ran (retried from
    the latest checkpoint)."""
    RESTART_LOOP = 14
    """The subtasks failed on every relaunch of the barrier stage Spark allows in one
    attempt (retried: a new attempt, counted against ``maxRestarts``)."""


PERMANENT_EXIT_CODES: frozenset[int] = frozenset(
    {ExitCode.BAD_CONFIG, ExitCode.USER_CODE_ERROR, ExitCode.RESTORE_FAILED,
     ExitCode.INCOMPATIBLE_STATE, ExitCode.SINK_REJECTED}
)

_REASONS: dict[int, Reason] = {
    ExitCode.FINISHED: Reason.FINISHED,
    ExitCode.BAD_CONFIG: Reason.INVALID_CONFIGURATION,
    ExitCode.USER_CODE_ERROR: Reason.USER_CODE_ERROR,
    ExitCode.CHECKPOINT_FAILURES_EXCEEDED: Reason.CHECKPOINT_FAILURES_EXCEEDED,
    ExitCode.STORAGE_UNREACHABLE: Reason.STORAGE_UNREACHABLE,
    ExitCode.RESTORE_FAILED: Reason.RESTORE_FAILED,
    ExitCode.CLEANUP_FAILED: Reason.CLEANUP_FAILED,
    ExitCode.SUSPENDED: Reason.SUSPENDED,
    ExitCode.FENCED: Reason.FENCED,
    ExitCode.INCOMPATIBLE_STATE: Reason.INCOMPATIBLE_STATE,
    ExitCode.SINK_REJECTED: Reason.SINK_REJECTED_RECORD,
    ExitCode.SINK_STALLED: Reason.SINK_STALLED,
    ExitCode.CHECKPOINT_STALLED: Reason.CHECKPOINT_STALLED,
    ExitCode.RESTART_LOOP: Reason.RESTART_LOOP,
    137: Reason.KILLED,
    143: Reason.TERMINATED,
}

_DESCRIPTIONS: dict[int, str] = {
    ExitCode.FINISHED: "the job finished",
    ExitCode.BAD_CONFIG: "bad arguments or configuration",
    ExitCode.USER_CODE_ERROR: "the job's code raised an error",
    ExitCode.CHECKPOINT_FAILURES_EXCEEDED: "too many consecutive checkpoint failures",
    ExitCode.STORAGE_UNREACHABLE: "checkpoint storage unreachable",
    ExitCode.RESTORE_FAILED: "the checkpoint to restore from is unreadable or foreign",
    ExitCode.CLEANUP_FAILED: "the checkpoint data could not be deleted",
    ExitCode.SUSPENDED: "stopped for a suspend after its final checkpoint was committed",
    ExitCode.FENCED: "stopped because a newer attempt took over its checkpoint store",
    ExitCode.INCOMPATIBLE_STATE: "the checkpoint's state does not fit the job's pipeline",
    ExitCode.SINK_REJECTED: "a sink refused a record for good",
    ExitCode.SINK_STALLED: "a sink could not deliver its output within the stall bound",
    ExitCode.CHECKPOINT_STALLED: "no checkpoint completed within the health window",
    ExitCode.RESTART_LOOP: "the subtasks failed on every relaunch the driver allows",
    137: "killed (SIGKILL, often out of memory)",
    143: "terminated (SIGTERM)",
}


def is_permanent(exit_code: int | None) -> bool:
    """Whether a driver that exited with ``exit_code`` must not be restarted."""
    return exit_code is not None and exit_code in PERMANENT_EXIT_CODES


def reason_for_exit(exit_code: int | None) -> Reason:
    """The reason for status and events (``UserCodeError``, ``DriverFailed``)."""
    if exit_code is None:
        return Reason.DRIVER_LOST
    return _REASONS.get(exit_code, Reason.DRIVER_FAILED)


def describe_exit(exit_code: int | None) -> str:
    """A short human description of an exit code, for messages."""
    if exit_code is None:
        return "exit code unknown"
    description = _DESCRIPTIONS.get(exit_code)
    if description is None:
        return f"exit code {exit_code}"
    return f"exit code {exit_code} ({description})"
