"""The stall watch: a running job that completes no checkpoint for its window is stuck.

The window adapts to the job: a number of intervals, at least three times its slowest
checkpoint, and before the first completed checkpoint at least the checkpoint timeout.
"""

from __future__ import annotations

from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.coordinator.stall_watch import SHORTEST_WINDOW, StallWatch
from job_runtime.errors import CheckpointStalledError


def watch(*, intervals: int = 5, interval: float = 10.0, timeout: float = 600.0) -> StallWatch:
    return StallWatch(settings=CheckpointSettings(interval=interval, timeout=timeout,
                                                  stall_intervals=intervals))


class TestTheWindow:
    def test_after_a_checkpoint_it_is_the_intervals(self) -> None:
        stalls = watch()
        stalls.running(now=0.0)
        stalls.completed(now=10.0, duration=0.5)
        assert stalls.check(now=60.0) is None
        stalled = stalls.check(now=61.0)
        assert isinstance(stalled, CheckpointStalledError)
        assert "no checkpoint completed for 51s" in str(stalled)
        assert "1 completed before" in str(stalled)

    def test_it_is_never_shorter_than_the_shortest_window(self) -> None:
        """Checkpoints by hand (interval 0) or every few milliseconds: a pause of the
        machine is no stall."""
        for interval in (0.0, 0.01):
            stalls = watch(interval=interval)
            stalls.running(now=0.0)
            stalls.completed(now=1.0, duration=0.001)
            assert stalls.window() == SHORTEST_WINDOW
            assert stalls.check(now=1.0 + SHORTEST_WINDOW) is None
            assert stalls.check(now=1.5 + SHORTEST_WINDOW) is not None

    def test_it_is_at_least_three_times_the_slowest_checkpoint(self) -> None:
        stalls = watch()
        stalls.running(now=0.0)
        stalls.completed(now=40.0, duration=40.0)
        assert stalls.window() == 120.0
        assert stalls.check(now=159.0) is None
        assert stalls.check(now=161.0) is not None

    def test_before_the_first_checkpoint_it_is_at_least_the_checkpoint_timeout(self) -> None:
        stalls = watch(timeout=600.0)
        stalls.running(now=0.0)
        assert stalls.check(now=599.0) is None
        assert stalls.check(now=601.0) is not None

    def test_a_checkpoint_opens_the_window_again(self) -> None:
        stalls = watch()
        stalls.running(now=0.0)
        stalls.completed(now=10.0, duration=1.0)
        stalls.completed(now=55.0, duration=1.0)
        assert stalls.check(now=100.0) is None


class TestWhenItWatches:
    def test_not_until_the_subtasks_are_running(self) -> None:
        stalls = watch()
        assert stalls.check(now=10_000.0) is None

    def test_a_relaunch_of_the_subtasks_closes_the_window_until_they_run_again(self) -> None:
        stalls = watch()
        stalls.running(now=0.0)
        stalls.completed(now=10.0, duration=1.0)
        stalls.new_epoch()
        assert stalls.check(now=500.0) is None
        stalls.running(now=500.0)
        assert stalls.check(now=549.0) is None
        assert stalls.check(now=551.0) is not None

    def test_zero_intervals_turn_it_off(self) -> None:
        stalls = watch(intervals=0)
        stalls.running(now=0.0)
        assert stalls.check(now=1e9) is None

    def test_a_checkpoint_that_fails_opens_the_window_again_the_budget_decides(
            self) -> None:
        stalls = watch()
        stalls.running(now=0.0)
        stalls.completed(now=10.0, duration=1.0)
        stalls.failed(now=50.0)
        assert stalls.check(now=99.0) is None
        assert stalls.check(now=101.0) is not None


def test_while_a_sinks_output_waits_its_own_bound_judges_not_the_watch() -> None:
    """A sink whose send blocks for its client's timeout (a broker away) holds the
    barrier too; the subtask reports its output overdue past the sink's bound
    (``SinkStalled``), which names the cause."""
    stalls = watch()
    stalls.running(now=0.0)
    stalls.completed(now=10.0, duration=0.5)
    assert stalls.check(now=1000.0, sink_waiting=990.0) is None
    assert isinstance(stalls.check(now=1000.0, sink_waiting=0.0), CheckpointStalledError)
