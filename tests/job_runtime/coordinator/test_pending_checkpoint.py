"""A pending checkpoint owns its acknowledgements: it completes once, when the last
task it waits for acknowledged, and its ``_metadata`` holds every task's part."""

from __future__ import annotations

from cjob_checkpoint.checkpoint_storage import StateHandle
from cjob_checkpoint.metadata import ChannelStateHandle, KeyedStateHandle, SinkTransactions
from job_runtime.coordinator.messages import Ack, AckState, AckStats, OperatorState
from job_runtime.coordinator.pending_checkpoint import JobShape, PendingCheckpoint

JOB = JobShape(job_id="uid-1", attempt=3, parallelism=2, max_parallelism=128, stages=2)


def handle(name: str) -> StateHandle:
    return StateHandle(uri=f"file:///c/chk-7/{name}", size_bytes=10, crc32=1)


def pending() -> PendingCheckpoint:
    return PendingCheckpoint(checkpoint_id=7, final=False, triggered_at=1000.0,
                             triggered_mono=50.0, tasks=JOB.tasks())


def ack(stage: int, subtask: int, *, state: AckState | None = None,
        stats: AckStats | None = None) -> Ack:
    return Ack(epoch=1, subtask=subtask, checkpoint_id=7, stage=stage,
               state=state or AckState(), stats=stats or AckStats())


class TestAcknowledgements:
    def test_the_last_task_to_acknowledge_completes_it_and_no_other(self) -> None:
        checkpoint = pending()
        answers = [checkpoint.acknowledge(ack(stage, subtask))
                   for stage, subtask in [(0, 0), (1, 1), (0, 1), (1, 0)]]
        assert answers == [False, False, False, True]
        assert checkpoint.completing

    def test_a_task_that_acknowledges_twice_counts_once(self) -> None:
        checkpoint = pending()
        assert not checkpoint.acknowledge(ack(0, 0))
        assert not checkpoint.acknowledge(ack(0, 0))
        assert not checkpoint.completing
        for stage, subtask in [(0, 1), (1, 0)]:
            checkpoint.acknowledge(ack(stage, subtask))
        assert checkpoint.acknowledge(ack(1, 1))
        assert not checkpoint.acknowledge(ack(1, 1)), "completed a second time"

    def test_statistics_sum_the_bytes_and_keep_the_slowest_part(self) -> None:
        checkpoint = pending()
        checkpoint.acknowledge(ack(0, 0, stats=AckStats(sync_ms=2, alignment_ms=9, bytes=100)))
        checkpoint.acknowledge(ack(0, 1, stats=AckStats(sync_ms=5, alignment_ms=1, bytes=20)))
        stats = checkpoint.stats
        assert (stats.acks, stats.size_bytes, stats.sync_ms_max, stats.alignment_ms_max) == (
            2, 120, 5, 9)

    def test_it_expires_after_its_timeout_unless_its_commit_is_under_way(self) -> None:
        checkpoint = pending()
        assert not checkpoint.expired(now_mono=59.0, timeout=10.0)
        assert checkpoint.expired(now_mono=61.0, timeout=10.0)
        for stage, subtask in sorted(JOB.tasks()):
            checkpoint.acknowledge(ack(stage, subtask))
        assert not checkpoint.expired(now_mono=600.0, timeout=10.0)


def test_its_metadata_holds_every_tasks_part_in_subtask_order() -> None:
    checkpoint = pending()
    checkpoint.acknowledge(ack(1, 1, state=AckState(
        operators={"count": OperatorState(handle=handle("count-1"), key_groups=(64, 128))},
        channels=handle("channels-1"), sinks={"out": [[7, "s1"]], "late": None})))
    checkpoint.acknowledge(ack(0, 0, state=AckState(sources={"0": 17, "1": {"offset": 4}})))
    checkpoint.acknowledge(ack(1, 0, state=AckState(
        operators={"count": OperatorState(handle=handle("count-0"), key_groups=(0, 64))},
        sinks={"out": [[7, "s0"]]})))
    checkpoint.acknowledge(ack(0, 1, state=AckState(sources={"2": 5})))
    metadata = checkpoint.metadata(JOB)
    assert (metadata.job, metadata.checkpoint_id, metadata.attempt, metadata.timestamp,
            metadata.parallelism, metadata.final) == ("uid-1", 7, 3, 1000.0, 2, False)
    assert metadata.sources == {0: 17, 1: {"offset": 4}, 2: 5}
    assert metadata.operators == {"count": (
        KeyedStateHandle(subtask=0, handle=handle("count-0"), key_groups=(0, 64)),
        KeyedStateHandle(subtask=1, handle=handle("count-1"), key_groups=(64, 128)))}
    assert metadata.channels == {1: (ChannelStateHandle(subtask=1,
                                                        handle=handle("channels-1")),)}
    assert metadata.sinks == (SinkTransactions(sink="out", subtask=0, pending=[[7, "s0"]]),
                              SinkTransactions(sink="out", subtask=1, pending=[[7, "s1"]]))
