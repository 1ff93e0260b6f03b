"""The driver's exit codes: what ended the job, as the number its supervisor reads.

The operator and ``cjob run`` decide from the exit code whether to restart
(``cjob_spec.exit_codes``), so each failure maps to one code, in one place. Two
moments differ in what they can see: while the driver *starts* (parse the job,
resolve the restore point, open the store) an error is raised straight to it;
once the barrier stage *runs*, the coordinator or Spark report why the job ended.
"""

from __future__ import annotations

import logging

from cjob_checkpoint.storage.errors import StorageError, StorageUnavailableError
from cjob_checkpoint.store.base import FencedError, StoreError
from cjob_spec.exit_codes import ExitCode
from job_runtime.errors import (
    CheckpointFailureBudgetExceeded,
    ConfigurationError,
    EntrypointError,
    JobCodeError,
    PipelineDefinitionError,
    RestoreError,
    UserCodeError,
)

log = logging.getLogger("job_runtime.driver")

FENCED = 1
"""A newer attempt owns the store: end quietly with a plain failure."""

STARTUP_ERRORS: tuple[type[BaseException], ...] = (
    EntrypointError, PipelineDefinitionError, ConfigurationError, JobCodeError, UserCodeError,
    RestoreError, StorageError, FencedError, StoreError)
"""What :func:`startup_exit_code` maps; anything else is a bug and keeps its traceback."""


def startup_exit_code(error: BaseException) -> int:
    """The exit code of an error raised while the driver started or ran; logs it."""
    if isinstance(error, (EntrypointError, PipelineDefinitionError, ConfigurationError,
                          JobCodeError)):
        log.error("%s", error)
        return ExitCode.BAD_CONFIG
    if isinstance(error, UserCodeError):
        log.error("%s", error)
        return ExitCode.USER_CODE_ERROR
    if isinstance(error, RestoreError):
        log.error("%s", error)
        return ExitCode.RESTORE_FAILED
    if isinstance(error, StorageUnavailableError):
        # Checkpoint storage, or an S3 archive of the job's code: the error names which.
        log.error("storage unreachable: %s", error)
        return ExitCode.STORAGE_UNREACHABLE
    if isinstance(error, FencedError):
        log.error("%s", error)
        return FENCED
    assert isinstance(error, (StoreError, StorageError)), error
    log.error("checkpoint store or storage failed: %s", error)
    return ExitCode.STORAGE_UNREACHABLE


def failure_exit_code(failure: BaseException) -> int:
    """The exit code of the reason the running job ended (from the coordinator or Spark)."""
    if isinstance(failure, UserCodeError):
        log.error("%s", failure)
        return ExitCode.USER_CODE_ERROR
    if isinstance(failure, EntrypointError):
        log.error("%s", failure)
        return ExitCode.BAD_CONFIG
    if isinstance(failure, CheckpointFailureBudgetExceeded):
        log.error("%s", failure)
        if "unavailable" in failure.last_reason or "unreachable" in failure.last_reason:
            return ExitCode.STORAGE_UNREACHABLE
        return ExitCode.CHECKPOINT_FAILURES_EXCEEDED
    if isinstance(failure, FencedError):
        log.error("%s", failure)
        return FENCED
    log.error("job failed: %s", failure)
    return 1
