"""When the coordinator starts a checkpoint.

The decider is pure bookkeeping over times the caller passes in, so these tests
drive it with made-up monotonic seconds.
"""

from __future__ import annotations

from typing import Any

from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.coordinator.request_decider import RequestDecider


def decider(**settings: Any) -> RequestDecider:
    return RequestDecider(settings=CheckpointSettings(**settings))


def periodic(d: RequestDecider, now: float, *, pending: int = 0) -> bool | None:
    return d.due(now=now, sources_finished=False, pending=pending, final_pending=False)


class TestPeriodicCheckpoints:
    def test_one_is_due_once_the_interval_passed_since_the_last_trigger(self) -> None:
        d = decider(interval=10.0)
        assert periodic(d, 10.0) is False
        assert periodic(d, 15.0) is None
        assert periodic(d, 20.0) is False

    def test_no_interval_means_no_periodic_checkpoints(self) -> None:
        assert periodic(decider(interval=0.0), 1000.0) is None

    def test_no_more_than_max_concurrent_are_pending(self) -> None:
        d = decider(interval=1.0, max_concurrent=2)
        assert periodic(d, 5.0, pending=2) is None
        assert periodic(d, 5.0, pending=1) is False

    def test_the_minimum_pause_counts_from_the_last_completion(self) -> None:
        d = decider(interval=1.0, min_pause=5.0)
        d.completed(now=10.0)
        assert periodic(d, 12.0) is None
        assert periodic(d, 15.0) is False

    def test_a_trigger_that_could_not_start_pauses_triggering(self) -> None:
        d = decider(interval=1.0, trigger_retry_pause=3.0)
        d.trigger_failed(now=10.0)
        assert periodic(d, 12.0) is None
        assert periodic(d, 13.0) is False


class TestTheFinalCheckpoint:
    def test_it_is_due_at_once_when_every_source_finished(self) -> None:
        d = decider(interval=1000.0)
        assert d.due(now=1.0, sources_finished=True, pending=5, final_pending=False) is True

    def test_only_one_is_pending_and_none_follows_a_completed_one(self) -> None:
        d = decider(interval=1.0)
        assert d.due(now=5.0, sources_finished=True, pending=1, final_pending=True) is None
        d.final_completed()
        assert d.due(now=9.0, sources_finished=True, pending=0, final_pending=False) is None

    def test_a_new_epoch_needs_its_own_final_checkpoint(self) -> None:
        d = decider(interval=1.0)
        d.final_completed()
        d.new_epoch()
        assert d.due(now=9.0, sources_finished=True, pending=0, final_pending=False) is True


class TestManualRequests:
    def test_they_are_read_every_poll_interval_and_only_while_nothing_is_pending(self) -> None:
        d = decider(trigger_poll_interval=5.0)
        assert d.poll_due(now=5.0, pending=0)
        assert not d.poll_due(now=7.0, pending=0)
        assert not d.poll_due(now=11.0, pending=1)
        assert d.poll_due(now=11.0, pending=0)

