"""Errors of the runtime, each with a class and the parameters that explain it.

Errors that a user can cause (a bad entrypoint, an exception in a ``map``, an
unreadable checkpoint) carry a one-line message meant for a terminal, and map to
an exit code of the driver (see :mod:`cjob_spec.exit_codes`).
"""

from __future__ import annotations

from typing import Any

from cjob_checkpoint.keyword_error import keyword_error


class RuntimeJobError(Exception):
    """Base class of every error the runtime raises on purpose."""


@keyword_error
class PipelineDefinitionError(RuntimeJobError):
    """The job's ``build`` function described an invalid pipeline."""

    problem: str

    def describe(self) -> str:
        return f"invalid pipeline: {self.problem}"


@keyword_error
class EntrypointError(RuntimeJobError):
    """The ``module:function`` entrypoint cannot be imported or called."""

    entrypoint: str
    problem: str

    def describe(self) -> str:
        return f"entrypoint {self.entrypoint!r}: {self.problem}"


@keyword_error
class UserCodeError(RuntimeJobError):
    """User code raised while processing records; ``details`` holds its traceback."""

    operator: str
    subtask: int
    details: str

    def describe(self) -> str:
        return (
            f"user code in operator {self.operator!r} (subtask {self.subtask}) failed:\n"
            f"{self.details}"
        )


@keyword_error
class CheckpointFailureBudgetExceeded(RuntimeJobError):
    """More consecutive checkpoints failed than ``tolerableFailures`` allows."""

    failures: int
    tolerable: int
    last_reason: str

    def describe(self) -> str:
        return (
            f"{self.failures} consecutive checkpoint failures exceed the tolerable "
            f"{self.tolerable}; last: {self.last_reason}"
        )


@keyword_error
class CheckpointStalledError(RuntimeJobError):
    """The job ran without completing a checkpoint for longer than its health window:
    something holds the barrier (a function that blocks, a subtask that stopped)."""

    seconds: float
    window: float
    completed: int
    """Checkpoints this driver completed before it stalled."""

    def describe(self) -> str:
        return (f"no checkpoint completed for {self.seconds:.0f}s while the job ran (the "
                f"health window is {self.window:.0f}s; {self.completed} completed before): "
                f"something holds the barrier, such as a function that blocks or a "
                f"subtask that stopped reading; restarting from the latest checkpoint")


@keyword_error
class RestartLoopError(RuntimeJobError):
    """The subtasks failed on every relaunch of the barrier stage the driver allows in a
    row (``--task-attempts`` launches): the attempt ends as a loop."""

    relaunches: int
    last: str

    def describe(self) -> str:
        return (f"the subtasks failed on every relaunch ({self.relaunches} in a row in this "
                f"attempt): a restart loop; last failure: {self.last}")


@keyword_error
class RestoreError(RuntimeJobError):
    """The requested checkpoint cannot be restored."""

    pointer: str
    problem: str

    def describe(self) -> str:
        return f"cannot restore from {self.pointer}: {self.problem}"


@keyword_error
class IncompatibleStateError(RuntimeJobError):
    """The checkpoint holds state the job's pipeline no longer maps, and the job does
    not allow dropping it (``spec.restore.allowNonRestoredState``)."""

    pointer: str
    problems: tuple[str, ...]

    def describe(self) -> str:
        return (f"the state of checkpoint {self.pointer} does not fit the job's pipeline: "
                f"{'; '.join(self.problems)}; keep each stateful operator's name "
                f"(name=...) and kind, restore another checkpoint, or set "
                f"spec.restore.allowNonRestoredState: true to start these operators empty")


@keyword_error
class ConfigurationError(RuntimeJobError):
    """A setting of the driver is invalid."""

    setting: str
    problem: str

    def describe(self) -> str:
        return f"{self.setting}: {self.problem}"


@keyword_error
class JobCodeError(RuntimeJobError):
    """An entry of the job's ``pythonPath`` cannot be used: a missing or forbidden S3
    object, or an archive that is not a readable zip."""

    source: str
    problem: str

    def describe(self) -> str:
        return f"job code {self.source}: {self.problem}"


def client_error_text(exc: BaseException) -> str:
    """The message of a client library's exception, as one line for an error of ours.

    Kafka's client wraps its error in the exception's first argument, an object whose
    ``str()`` method has the text; other exceptions are their own ``str``.
    """
    first: Any = exc.args[0] if exc.args else None
    text = str(first.str()) if callable(getattr(first, "str", None)) else str(exc)
    return text or type(exc).__name__


@keyword_error
class UnpublishedInputError(RuntimeJobError):
    """A subtask was not told where the staged copy of its input ``name`` is published:
    it never lists staging directories itself, since an unpublished one may be stale."""

    name: str

    def describe(self) -> str:
        return f"no published staged copy of the input {self.name!r} was given to the subtask"
