"""The driver's exit codes: what ended the job, as the number its supervisor reads.

The operator and ``cjob run`` decide from the exit code whether to restart
(``cjob_spec.exit_codes``), so each failure maps to one code, in one place. Two
moments differ in what they can see: while the driver *starts* (parse the job,
resolve the restore point, open the store) an error is raised straight to it;
once the barrier stage *runs*, the coordinator or Spark report why the job ended.
"""

from __future__ import annotations

import dataclasses

from cjob_checkpoint.storage.errors import StorageError, StorageUnavailableError
from cjob_checkpoint.store.completed_store import FencedError, StoreError
from cjob_checkpoint.store.configmap_errors import StoreCredentialsError
from cjob_spec.exit_codes import ExitCode
from job_runtime.errors import (
    CheckpointFailureBudgetExceeded,
    CheckpointStalledError,
    ConfigurationError,
    EntrypointError,
    IncompatibleStateError,
    JobCodeError,
    PipelineDefinitionError,
    RestartLoopError,
    RestoreError,
    UserCodeError,
)
from job_runtime.execution.driver.fence import AttemptRevokedError
from job_runtime.execution.driver.logger import log
from job_runtime.sinks.failures import SinkFailedError, SinkFailureKind

FENCED = ExitCode.FENCED
"""A newer attempt owns the store: end quietly, with the code that tells the operator
this driver was alive when it was superseded."""


@dataclasses.dataclass(frozen=True)
class _Mapping:
    """Errors of these types end the driver with ``code``, logged with ``message``."""

    errors: tuple[type[BaseException], ...]
    code: int
    message: str = "%s"


_MAPPINGS = (
    _Mapping((EntrypointError, PipelineDefinitionError, ConfigurationError, JobCodeError,
              StoreCredentialsError), ExitCode.BAD_CONFIG),
    _Mapping((UserCodeError,), ExitCode.USER_CODE_ERROR),
    _Mapping((SinkFailedError,), ExitCode.SINK_REJECTED),
    _Mapping((RestoreError,), ExitCode.RESTORE_FAILED),
    _Mapping((IncompatibleStateError,), ExitCode.INCOMPATIBLE_STATE),
    # Checkpoint storage, or an S3 archive of the job's code: the error names which.
    _Mapping((StorageUnavailableError,), ExitCode.STORAGE_UNREACHABLE, "storage unreachable: %s"),
    _Mapping((FencedError, AttemptRevokedError), FENCED),
    _Mapping((CheckpointFailureBudgetExceeded,), ExitCode.CHECKPOINT_FAILURES_EXCEEDED),
    _Mapping((CheckpointStalledError,), ExitCode.CHECKPOINT_STALLED),
    _Mapping((RestartLoopError,), ExitCode.RESTART_LOOP),
    _Mapping((StoreError, StorageError), ExitCode.STORAGE_UNREACHABLE,
             "checkpoint store or storage failed: %s"),
)
"""First match wins, so a subclass is listed before its base."""

STARTUP_ERRORS: tuple[type[BaseException], ...] = tuple(
    error for mapping in _MAPPINGS for error in mapping.errors
    if error not in (CheckpointFailureBudgetExceeded, CheckpointStalledError, RestartLoopError,
                     SinkFailedError))
"""What the driver maps while it starts; anything else is a bug and keeps its traceback."""


def exit_code(error: BaseException, *, logged: bool = False) -> int:
    """The exit code of an error raised while the driver started, or of the reason the
    running job ended (from the coordinator or Spark); logs it once, unless the caller
    already said what ended the process (``logged``)."""
    for mapping in _MAPPINGS:
        if isinstance(error, mapping.errors):
            if not logged:
                log.error(mapping.message, error)
            if isinstance(error, SinkFailedError) and error.kind is SinkFailureKind.STALLED:
                return ExitCode.SINK_STALLED
            if isinstance(error, CheckpointFailureBudgetExceeded) and (
                    "unavailable" in error.last_reason or "unreachable" in error.last_reason):
                return ExitCode.STORAGE_UNREACHABLE
            return mapping.code
    if not logged:
        log.error("job failed: %s", error)
    return 1
