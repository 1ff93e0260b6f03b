"""The driver relaunches the barrier stage after a failed launch, until the failures
in a row are a loop.

The loop runs over stand-in launches (what one returns is what Spark would have
said of it); the Spark tier's recovery tests run the real relaunches.
"""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

from job_runtime.errors import RestartLoopError, UserCodeError
from job_runtime.execution.driver.barrier_stage import BarrierStage, LaunchFailed
from job_runtime.execution.driver.relaunch import STABLE_SECONDS, RelaunchBudget, run_launches


class Verdict:
    """The coordinator's side: no failure of its own."""

    failed_event = threading.Event()
    failure: BaseException | None = None


class Launch:
    """A launch that ends with ``outcome`` after ``ran_seconds``."""

    def __init__(self, *, epoch: int, outcome: BaseException | None,
                 ran_seconds: float = 1.0) -> None:
        self.epoch = epoch
        self.outcome = outcome
        self.ran_seconds = ran_seconds

    def wait(self, *, coordinator: Any) -> BaseException | None:
        return self.outcome


def run(outcomes: list[tuple[BaseException | None, float]], *, launches: int,
        ) -> tuple[BaseException | None, list[int]]:
    """Run the loop over launches ending as ``outcomes`` say; what it returned and the
    epochs it launched after the first."""
    relaunched: list[int] = []

    def relaunch(epoch: int) -> BarrierStage:
        relaunched.append(epoch)
        outcome, ran = outcomes[len(relaunched)]
        return cast(BarrierStage, Launch(epoch=epoch, outcome=outcome, ran_seconds=ran))

    outcome, ran = outcomes[0]
    first = cast(BarrierStage, Launch(epoch=1, outcome=outcome, ran_seconds=ran))
    result = run_launches(first, relaunch=relaunch, coordinator=Verdict(),
                          budget=RelaunchBudget(launches=launches))
    return result, relaunched


def died() -> LaunchFailed:
    return LaunchFailed("Task 1 in stage 0.0 failed: Python worker exited unexpectedly")


def test_a_launch_that_finishes_the_job_is_the_only_one() -> None:
    assert run([(None, 5.0)], launches=4) == (None, [])


def test_a_failed_launch_is_followed_by_one_with_the_next_epoch() -> None:
    result, relaunched = run([(died(), 2.0), (died(), 2.0), (None, 9.0)], launches=4)
    assert result is None
    assert relaunched == [2, 3]


def test_launches_failing_in_a_row_end_the_attempt_as_a_restart_loop() -> None:
    result, relaunched = run([(died(), 1.0)] * 4, launches=4)
    assert isinstance(result, RestartLoopError)
    assert relaunched == [2, 3, 4]
    assert result.relaunches == 3
    assert "Python worker exited unexpectedly" in result.last


def test_a_permanent_failure_is_never_relaunched() -> None:
    error = UserCodeError(operator="map-1", subtask=0, details="ZeroDivisionError")
    assert run([(error, 1.0)], launches=4) == (error, [])


def test_a_launch_that_ran_long_before_it_failed_starts_the_count_afresh() -> None:
    # Three quick failures, one after a stable run, three quick ones: never four in a row.
    outcomes = [(died(), 1.0)] * 3 + [(died(), STABLE_SECONDS)] + [(died(), 1.0)] * 2
    result, relaunched = run([*outcomes, (None, 1.0)], launches=4)
    assert result is None
    assert relaunched == [2, 3, 4, 5, 6, 7]


def test_one_launch_allowed_means_no_relaunch() -> None:
    result, relaunched = run([(died(), 1.0)], launches=1)
    assert isinstance(result, RestartLoopError) and relaunched == []


def test_a_budget_without_a_launch_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RelaunchBudget(launches=0)
