"""An unexpected exception in a reconcile pass is reported and retried with backoff.

Without this, a bug (or input no validation foresaw) escaped the job's loop, kopf
logged it and restarted the daemon a minute later, and the user saw nothing on the
job. Now it becomes a ``ReconcileError`` Warning Event on the job and the loop backs
off by itself, as it does for API errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from cjob_operator.cluster import StoreReading
from cjob_operator.loops import LoopSettings, Wakeups, run_job_loop
from cjob_operator.reconcile import Reconciler, RetrySettings
from operator_world import RecordingCluster, document


class BrokenStoreCluster(RecordingCluster):
    """A cluster whose checkpoint store read fails with an error nobody expected."""

    def __init__(self, job: Mapping[str, Any], *, failures: int) -> None:
        super().__init__(job)
        self.failures_left = failures

    def read_store(self, *, namespace: str, name: str) -> StoreReading | None:
        if self.failures_left > 0:
            self.failures_left -= 1
            raise OverflowError("date value out of range")
        return None


def reconciler_for(cluster: BrokenStoreCluster) -> Reconciler:
    return Reconciler(cluster=cluster, retry=RetrySettings(first_delay=1.0, max_delay=60.0),
                      clock=lambda: datetime(2024, 5, 1, 12, tzinfo=UTC))


def test_an_unexpected_exception_becomes_a_warning_event_and_a_backoff() -> None:
    cluster = BrokenStoreCluster(document(), failures=1)
    outcome = reconciler_for(cluster).reconcile(namespace="team", name="clicks", pods=[])
    assert outcome.requeue_after == 1.0
    assert outcome.error is not None and "OverflowError" in outcome.error
    ((kind, reason, message),) = cluster.events
    assert (kind, reason) == ("Warning", "ReconcileError")
    assert "OverflowError: date value out of range" in message
    assert "\n" not in message


def test_repeated_unexpected_exceptions_back_off_further_and_are_reported_once() -> None:
    cluster = BrokenStoreCluster(document(), failures=3)
    reconciler = reconciler_for(cluster)
    delays = [reconciler.reconcile(namespace="team", name="clicks", pods=[]).requeue_after
              for _ in range(3)]
    assert delays == [1.0, 2.0, 4.0]
    assert [reason for _, reason, _ in cluster.events] == ["ReconcileError"]


def test_the_next_pass_after_an_unexpected_exception_carries_on_normally() -> None:
    cluster = BrokenStoreCluster(document(), failures=1)
    reconciler = reconciler_for(cluster)
    reconciler.reconcile(namespace="team", name="clicks", pods=[])
    outcome = reconciler.reconcile(namespace="team", name="clicks", pods=[])
    assert outcome.error is None
    assert len(cluster.pods) == 1


def test_the_job_loop_survives_an_unexpected_exception_and_retries_by_itself() -> None:
    cluster = BrokenStoreCluster(document(), failures=1)
    reconciler = Reconciler(cluster=cluster,
                            retry=RetrySettings(first_delay=0.01, max_delay=0.01),
                            clock=lambda: datetime(2024, 5, 1, 12, tzinfo=UTC))

    class StopWhenDriverCreated:
        def __bool__(self) -> bool:
            return bool(cluster.pods)

        def is_set(self) -> bool:
            return bool(cluster.pods)

        async def wait(self) -> None:
            while not cluster.pods:
                await asyncio.sleep(0.01)

    async def main() -> None:
        await asyncio.wait_for(
            run_job_loop(reconciler=reconciler, wakeups=Wakeups(), namespace="team",
                         name="clicks", pods=list, stopped=StopWhenDriverCreated(),
                         settings=LoopSettings(settle_seconds=0.0, idle_seconds=0.05)),
            timeout=10.0)

    asyncio.run(main())
    assert len(cluster.pods) == 1
    assert [reason for _, reason, _ in cluster.events][:1] == ["ReconcileError"]
