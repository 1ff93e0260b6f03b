"""Relaunching the barrier stage after a subtask died, until the attempt is a loop.

The driver, not Spark, relaunches the stage: each launch is a Spark job of its own
whose subtasks carry their epoch (the launch's number) in their settings, so that
they meet at the coordinator as soon as they start and a zombie of an earlier launch
is told apart by the number it says. (Spark's own stage retry knew the new attempt
only through ``allGather``, which waited up to a second on every start.)

How many launches may fail in a row is :class:`RelaunchBudget`'s to say: a subtask
that dies on every relaunch ends the attempt as a restart loop, while a never-ending
job whose subtasks die once in a while (a launch that ran :data:`STABLE_SECONDS`
before it failed) starts counting afresh instead of ending after its fourth crash in
a month.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from job_runtime.errors import RestartLoopError
from job_runtime.execution.driver.barrier_stage import BarrierStage, FailureSource, LaunchFailed
from job_runtime.execution.driver.logger import log

STABLE_SECONDS = 600.0
"""A launch that ran this long before it failed does not count towards a loop."""


@dataclasses.dataclass(kw_only=True)
class RelaunchBudget:
    """Failed launches in a row, and whether one more is allowed."""

    launches: int
    """Launches that may fail in a row (``--task-attempts``): the last one's failure
    ends the attempt."""
    stable_seconds: float = STABLE_SECONDS
    failed_in_a_row: int = 0

    def __post_init__(self) -> None:
        if self.launches < 1:
            raise ValueError(f"launches must be at least 1, got {self.launches}")

    def relaunch_after(self, *, ran_seconds: float) -> bool:
        """A launch failed after ``ran_seconds``: whether to launch the stage again."""
        if ran_seconds >= self.stable_seconds:
            self.failed_in_a_row = 0
        self.failed_in_a_row += 1
        return self.failed_in_a_row < self.launches


def run_launches(first: BarrierStage, *, relaunch: Callable[[int], BarrierStage],
                 coordinator: FailureSource, budget: RelaunchBudget,
                 ) -> BaseException | None:
    """Wait for ``first`` (already started) and relaunch the stage through
    ``relaunch(epoch)`` after every failed launch the budget allows; ``None`` when a
    launch finished the job, else what ended the attempt."""
    stage = first
    relaunches = 0
    while True:
        outcome = stage.wait(coordinator=coordinator)
        if not isinstance(outcome, LaunchFailed):
            return outcome
        if not budget.relaunch_after(ran_seconds=stage.ran_seconds):
            return RestartLoopError(relaunches=relaunches, last=outcome.summary)
        relaunches += 1
        log.warning("the barrier stage's launch %d failed (%s); launching it again from "
                    "the latest checkpoint", stage.epoch, outcome.summary)
        stage = relaunch(stage.epoch + 1)
