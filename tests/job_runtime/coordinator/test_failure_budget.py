"""Which failed checkpoints count against ``tolerableFailures``, and when the job ends.

Like Flink's ``CheckpointFailureManagerTest``, the counting rule is checked for
every :class:`AbortReason`: a reason added to the enum fails here until the
budget says whether it counts.
"""

from __future__ import annotations

import pytest

from job_runtime.coordinator.abort_reason import AbortReason
from job_runtime.coordinator.failure_budget import FailureBudget, counts

COUNTED = {
    AbortReason.TRIGGER_FAILED: True,
    AbortReason.EXPIRED: True,
    AbortReason.DECLINED: True,
    AbortReason.DECLINED_SUBSUMED: False,
    AbortReason.SUBSUMED: False,
    AbortReason.SUBTASKS_RESTARTED: False,
    AbortReason.STALE_SHARED_FILES: True,
    AbortReason.COMMIT_FAILED: True,
    AbortReason.STORE_WRITE_AMBIGUOUS: True,
    AbortReason.STORE_FAILED: True,
}
"""Whether each reason counts: only failures that say nothing about the job's
checkpointing (a newer checkpoint or barrier overtook it, the subtasks restarted)
are free."""


def test_every_reason_is_decided_here() -> None:
    assert set(COUNTED) == set(AbortReason)


@pytest.mark.parametrize("reason", list(AbortReason), ids=lambda r: r.name)
def test_a_reason_counts_or_not_and_the_budget_decides_accordingly(
        reason: AbortReason) -> None:
    assert counts(reason) is COUNTED[reason]
    budget = FailureBudget(tolerable=1)
    assert budget.failed(reason=reason, message="first") is None
    exceeded = budget.failed(reason=reason, message="second")
    if COUNTED[reason]:
        assert exceeded is not None
        assert (exceeded.failures, exceeded.tolerable) == (2, 1)
        assert exceeded.last_reason == "second"
    else:
        assert exceeded is None
        assert budget.consecutive == 0


@pytest.mark.parametrize("reason", [r for r in AbortReason if not COUNTED[r]],
                         ids=lambda r: r.name)
def test_a_reason_that_does_not_count_neither_spends_nor_resets_the_budget(
        reason: AbortReason) -> None:
    budget = FailureBudget(tolerable=1)
    assert budget.failed(reason=AbortReason.EXPIRED, message="expired after 1s") is None
    assert budget.failed(reason=reason, message="free") is None
    exceeded = budget.failed(reason=AbortReason.DECLINED, message="declined: upload failed")
    assert exceeded is not None and exceeded.failures == 2


def test_failures_within_the_budget_are_tolerated_and_one_more_ends_the_job() -> None:
    budget = FailureBudget(tolerable=2)
    assert budget.failed(reason=AbortReason.EXPIRED, message="expired after 1s") is None
    assert budget.failed(reason=AbortReason.EXPIRED, message="expired after 1s") is None
    exceeded = budget.failed(reason=AbortReason.DECLINED, message="declined: upload failed")
    assert exceeded is not None
    assert exceeded.failures == 3 and exceeded.last_reason == "declined: upload failed"


def test_a_completed_checkpoint_resets_the_count() -> None:
    budget = FailureBudget(tolerable=1)
    assert budget.failed(reason=AbortReason.EXPIRED, message="expired after 1s") is None
    budget.succeeded()
    assert budget.failed(reason=AbortReason.EXPIRED, message="expired after 1s") is None
