"""Every way a driver can end maps to one exit code, the number its supervisor decides on.

Startup errors and the reason a running job ended share one table, so the same
error never ends a driver with two different codes depending on when it came.
"""

from __future__ import annotations

import pytest

from cjob_checkpoint.storage.errors import StorageError, StorageUnavailableError
from cjob_checkpoint.store.completed_store import FencedError, StoreError
from cjob_spec.exit_codes import ExitCode
from job_runtime.errors import (
    CheckpointFailureBudgetExceeded,
    CheckpointStalledError,
    ConfigurationError,
    EntrypointError,
    RestartLoopError,
    RestoreError,
    UserCodeError,
)
from job_runtime.execution.driver.exit_codes import FENCED, STARTUP_ERRORS, exit_code
from job_runtime.sinks.failures import SinkFailedError, SinkFailureKind


@pytest.mark.parametrize(("error", "code"), [
    (EntrypointError(entrypoint="jobs:build", problem="no module"), ExitCode.BAD_CONFIG),
    (ConfigurationError(setting="--parallelism", problem="must be positive"),
     ExitCode.BAD_CONFIG),
    (UserCodeError(operator="map", subtask=0, details="ZeroDivisionError"),
     ExitCode.USER_CODE_ERROR),
    (RestoreError(pointer="chk-3", problem="missing"), ExitCode.RESTORE_FAILED),
    (StorageUnavailableError(uri="s3://b/k", cause="connection refused"), ExitCode.STORAGE_UNREACHABLE),
    (StorageError(uri="s3://b/k", cause="access denied"), ExitCode.STORAGE_UNREACHABLE),
    (StoreError("the store's ConfigMap is gone"), ExitCode.STORAGE_UNREACHABLE),
    (FencedError(attempt=1, current_attempt=2), FENCED),
    (CheckpointFailureBudgetExceeded(failures=3, tolerable=2, last_reason="declined"),
     ExitCode.CHECKPOINT_FAILURES_EXCEEDED),
    (CheckpointFailureBudgetExceeded(failures=3, tolerable=2,
                                     last_reason="storage unavailable: timeout"),
     ExitCode.STORAGE_UNREACHABLE),
    (SinkFailedError(kind=SinkFailureKind.REJECTED, sink="kafka", subtask=0, checkpoint_id=3,
                     problem="record 2: too large"), ExitCode.SINK_REJECTED),
    (SinkFailedError(kind=SinkFailureKind.STALLED, sink="kafka", subtask=0, checkpoint_id=3,
                     problem="failing for 601s"), ExitCode.SINK_STALLED),
    (CheckpointStalledError(seconds=61, window=50, completed=2), ExitCode.CHECKPOINT_STALLED),
    (RestartLoopError(relaunches=3, last="Task 0 failed 4 times"), ExitCode.RESTART_LOOP),
    (RuntimeError("executor lost"), 1),
])  # fmt: skip
def test_each_ending_maps_to_its_exit_code(error: BaseException, code: int) -> None:
    assert exit_code(error) == code


def test_a_fenced_attempt_is_a_startup_error_that_is_not_a_traceback() -> None:
    assert FencedError in STARTUP_ERRORS and StoreError in STARTUP_ERRORS


def test_a_failed_checkpoint_budget_can_only_end_a_running_job() -> None:
    assert CheckpointFailureBudgetExceeded not in STARTUP_ERRORS
    assert RuntimeError not in STARTUP_ERRORS
