"""Why a driver stops, when a newer attempt owns the store.

A zombie driver (its node cut off while a newer attempt took over) often sees its
checkpoints fail, or stall, before one reaches a fenced write. It must still say it
was fenced: that is why it stopped, and its exit code says so.
"""

from __future__ import annotations

from cjob_checkpoint.store.backed import advance_fence
from cjob_checkpoint.store.completed_store import FencedError, StoreError
from cjob_checkpoint.store.configmap_errors import StoreAccessDeniedError
from cjob_checkpoint.store.memory import InMemoryCheckpointStore, MemoryBackend
from cjob_spec.exit_codes import ExitCode
from job_runtime.errors import CheckpointFailureBudgetExceeded
from job_runtime.execution.driver.exit_codes import exit_code
from job_runtime.execution.driver.fence import AttemptRevokedError, fenced_instead

BUDGET = CheckpointFailureBudgetExceeded(failures=1, tolerable=0,
                                         last_reason="declined: files taken over")


def test_a_fenced_attempt_whose_checkpoints_failed_exits_as_fenced() -> None:
    backend = MemoryBackend()
    zombie = InMemoryCheckpointStore(attempt=1, backend=backend)
    advance_fence(backend, 2, where="test")

    outcome = fenced_instead(BUDGET, store=zombie, attempt=1)

    assert isinstance(outcome, FencedError)
    assert (outcome.attempt, outcome.current_attempt) == (1, 2)
    assert exit_code(outcome, logged=True) == ExitCode.FENCED


def test_the_current_attempt_keeps_its_own_failure() -> None:
    backend = MemoryBackend()
    store = InMemoryCheckpointStore(attempt=2, backend=backend)
    advance_fence(backend, 2, where="test")

    assert fenced_instead(BUDGET, store=store, attempt=2) is BUDGET
    assert exit_code(BUDGET, logged=True) == ExitCode.CHECKPOINT_FAILURES_EXCEEDED


def test_a_store_that_cannot_be_read_leaves_the_failure_as_it_was() -> None:
    class Unreadable(InMemoryCheckpointStore):
        def check_fence(self) -> None:
            raise StoreError("the API server is away")

    assert fenced_instead(BUDGET, store=Unreadable(attempt=1), attempt=1) is BUDGET


def test_a_failure_that_already_names_the_fence_is_not_read_again() -> None:
    class Unread(InMemoryCheckpointStore):
        def check_fence(self) -> None:
            raise AssertionError("the store was read")

    already = FencedError(attempt=1, current_attempt=3)
    assert fenced_instead(already, store=Unread(attempt=1), attempt=1) is already


def _refusing(status: int) -> type[InMemoryCheckpointStore]:
    class Refusing(InMemoryCheckpointStore):
        def check_fence(self) -> None:
            raise StoreAccessDeniedError(namespace="jobs", name="sums-checkpoints",
                                         operation="read", status=status,
                                         message="Unauthorized")
    return Refusing


def test_an_attempt_whose_identity_the_api_server_no_longer_accepts_exits_as_fenced() -> None:
    # The operator force-deletes the pod of a driver whose node it lost, which revokes
    # the pod's token before the next attempt moves the fence: the old driver can no
    # longer read the fence, but the refusal itself says it was replaced.
    outcome = fenced_instead(BUDGET, store=_refusing(401)(attempt=1), attempt=1)

    assert isinstance(outcome, AttemptRevokedError)
    assert outcome.attempt == 1
    assert "HTTP 401" in str(outcome) and "replaced" in str(outcome)
    assert exit_code(outcome, logged=True) == ExitCode.FENCED


def test_an_attempt_refused_its_rights_keeps_its_own_failure() -> None:
    # 403: a Role without the right, a setup mistake that no newer attempt explains.
    assert fenced_instead(BUDGET, store=_refusing(403)(attempt=1), attempt=1) is BUDGET
