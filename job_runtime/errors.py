"""Errors of the runtime, each with a class and the parameters that explain it.

Errors that a user can cause (a bad entrypoint, an exception in a ``map``, an
unreadable checkpoint) carry a one-line message meant for a terminal, and map to
an exit code of the driver (see :mod:`cjob_spec.exit_codes`).
"""

from __future__ import annotations


class RuntimeJobError(Exception):
    """Base class of every error the runtime raises on purpose."""


class PipelineDefinitionError(RuntimeJobError):
    """The job's ``build`` function described an invalid pipeline."""

    def __init__(self, *, problem: str) -> None:
        super().__init__(f"invalid pipeline: {problem}")
        self.problem = problem


class EntrypointError(RuntimeJobError):
    """The ``module:function`` entrypoint cannot be imported or called."""

    def __init__(self, *, entrypoint: str, problem: str) -> None:
        super().__init__(f"entrypoint {entrypoint!r}: {problem}")
        self.entrypoint = entrypoint
        self.problem = problem


class UserCodeError(RuntimeJobError):
    """User code raised while processing records; ``details`` holds its traceback."""

    def __init__(self, *, operator: str, subtask: int, details: str) -> None:
        super().__init__(f"user code in operator {operator!r} (subtask {subtask}) failed:\n{details}")
        self.operator = operator
        self.subtask = subtask
        self.details = details


class CheckpointFailureBudgetExceeded(RuntimeJobError):
    """More consecutive checkpoints failed than ``tolerableFailures`` allows."""

    def __init__(self, *, failures: int, tolerable: int, last_reason: str) -> None:
        super().__init__(
            f"{failures} consecutive checkpoint failures exceed the tolerable {tolerable}; "
            f"last: {last_reason}"
        )
        self.failures = failures
        self.tolerable = tolerable
        self.last_reason = last_reason


class RestoreError(RuntimeJobError):
    """The requested checkpoint cannot be restored."""

    def __init__(self, *, pointer: str, problem: str) -> None:
        super().__init__(f"cannot restore from {pointer}: {problem}")
        self.pointer = pointer
        self.problem = problem


class ConfigurationError(RuntimeJobError):
    """A setting of the driver is invalid."""

    def __init__(self, *, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting
        self.problem = problem


class JobCodeError(RuntimeJobError):
    """An entry of the job's ``pythonPath`` cannot be used: a missing or forbidden S3
    object, or an archive that is not a readable zip."""

    def __init__(self, *, source: str, problem: str) -> None:
        super().__init__(f"job code {source}: {problem}")
        self.source = source
        self.problem = problem
