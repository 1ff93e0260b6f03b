"""Barrier handlers decide when a task with several input channels snapshots.

They are pure state machines driven by the task thread, so they are tested here
with a listener that records what the task was asked to do.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from cjob_spec.model import CheckpointMode
from job_runtime.barriers import (
    AlignedBarrierHandler,
    AtLeastOnceBarrierHandler,
    UnalignedBarrierHandler,
    build_barrier_handler,
)
from job_runtime.records import Batch


@dataclasses.dataclass
class RecordingListener:
    """Stands in for the task: remembers snapshots, aborts and channel state."""

    snapshots: list[int] = dataclasses.field(default_factory=list)
    aborts: list[tuple[int, bool]] = dataclasses.field(default_factory=list)
    channel_states: list[tuple[int, dict[int, list[Batch]]]] = dataclasses.field(
        default_factory=list)

    def on_snapshot(self, checkpoint_id: int, *, alignment_seconds: float) -> None:
        assert alignment_seconds >= 0
        self.snapshots.append(checkpoint_id)

    def on_abort(self, checkpoint_id: int, *, reason: str, forward_cancel: bool) -> None:
        assert reason
        self.aborts.append((checkpoint_id, forward_cancel))

    def on_channel_state(self, checkpoint_id: int, state: dict[int, list[Batch]]) -> None:
        self.channel_states.append((checkpoint_id, state))


def rows(*values: int) -> Batch:
    return Batch(rows=[{"v": v} for v in values])


def values_of(batches: list[Batch]) -> list[Any]:
    return [r["v"] for b in batches for r in b.rows]


# --------------------------------------------------------------------------- aligned


class TestAlignedExactlyOnce:
    def test_a_channel_that_delivered_the_barrier_is_blocked_until_all_channels_did(self) -> None:
        listener = RecordingListener()
        handler = AlignedBarrierHandler(channels=3, listener=listener)

        handler.on_barrier(0, 1)
        assert handler.blocked == {0}
        handler.on_barrier(2, 1)
        assert handler.blocked == {0, 2}
        assert listener.snapshots == []

        handler.on_barrier(1, 1)
        assert listener.snapshots == [1]
        assert handler.blocked == frozenset()

    def test_the_snapshot_is_taken_once_even_if_a_barrier_arrives_twice(self) -> None:
        listener = RecordingListener()
        handler = AlignedBarrierHandler(channels=2, listener=listener)
        handler.on_barrier(0, 1)
        handler.on_barrier(0, 1)
        assert listener.snapshots == []
        handler.on_barrier(1, 1)
        handler.on_barrier(1, 1)
        assert listener.snapshots == [1]

    def test_closed_channels_count_as_aligned(self) -> None:
        listener = RecordingListener()
        handler = AlignedBarrierHandler(channels=3, listener=listener)
        handler.on_end_of_partition(1)
        handler.on_barrier(0, 5)
        assert listener.snapshots == []
        handler.on_barrier(2, 5)
        assert listener.snapshots == [5]

    def test_end_of_partition_on_the_last_missing_channel_completes_the_alignment(self) -> None:
        listener = RecordingListener()
        handler = AlignedBarrierHandler(channels=3, listener=listener)
        handler.on_barrier(0, 2)
        handler.on_barrier(1, 2)
        assert listener.snapshots == []
        handler.on_end_of_partition(2)
        assert listener.snapshots == [2]
        assert handler.blocked == frozenset()

    def test_a_blocked_channel_that_ends_is_no_longer_blocked(self) -> None:
        listener = RecordingListener()
        handler = AlignedBarrierHandler(channels=3, listener=listener)
        handler.on_barrier(0, 1)
        handler.on_end_of_partition(0)
        assert 0 not in handler.blocked
        assert listener.snapshots == []
        handler.on_barrier(1, 1)
        handler.on_barrier(2, 1)
        assert listener.snapshots == [1]

    def test_a_newer_barrier_aborts_the_older_alignment_and_starts_its_own(self) -> None:
        listener = RecordingListener()
        handler = AlignedBarrierHandler(channels=3, listener=listener)
        handler.on_barrier(0, 1)
        handler.on_barrier(1, 1)

        handler.on_barrier(2, 2)
        assert listener.aborts == [(1, False)]
        assert handler.blocked == {2}

        handler.on_barrier(0, 2)
        handler.on_barrier(1, 2)
        assert listener.snapshots == [2]

    def test_a_late_barrier_of_an_aborted_checkpoint_is_ignored(self) -> None:
        listener = RecordingListener()
        handler = AlignedBarrierHandler(channels=2, listener=listener)
        handler.on_barrier(0, 1)
        handler.on_barrier(1, 2)        # aborts 1
        handler.on_barrier(1, 1)        # late, for the aborted checkpoint
        assert handler.blocked == {1}
        assert listener.snapshots == []
        handler.on_barrier(0, 2)
        assert listener.snapshots == [2]

    def test_a_cancel_marker_aborts_the_alignment_unblocks_and_is_forwarded(self) -> None:
        listener = RecordingListener()
        handler = AlignedBarrierHandler(channels=3, listener=listener)
        handler.on_barrier(0, 1)
        handler.on_barrier(1, 1)
        handler.on_cancel(2, 1)
        assert listener.aborts == [(1, True)]
        assert handler.blocked == frozenset()
        # The remaining barriers of the cancelled checkpoint change nothing.
        handler.on_barrier(2, 1)
        assert listener.snapshots == []
        assert handler.blocked == frozenset()

    def test_a_cancel_marker_of_a_newer_checkpoint_aborts_both(self) -> None:
        listener = RecordingListener()
        handler = AlignedBarrierHandler(channels=2, listener=listener)
        handler.on_barrier(0, 1)
        handler.on_cancel(1, 2)
        assert listener.aborts == [(1, False), (2, True)]
        assert handler.blocked == frozenset()
        handler.on_barrier(0, 2)
        handler.on_barrier(1, 2)
        assert listener.snapshots == []

    def test_the_coordinator_aborting_a_checkpoint_releases_the_blocked_channels(self) -> None:
        listener = RecordingListener()
        handler = AlignedBarrierHandler(channels=2, listener=listener)
        handler.on_barrier(0, 3)
        handler.abort_pending(3, reason="expired")
        assert handler.blocked == frozenset()
        assert listener.aborts == [(3, True)]
        handler.on_barrier(1, 3)
        assert listener.snapshots == []

    def test_consecutive_checkpoints_each_snapshot_once(self) -> None:
        listener = RecordingListener()
        handler = AlignedBarrierHandler(channels=2, listener=listener)
        for checkpoint_id in (1, 2, 3):
            handler.on_barrier(1, checkpoint_id)
            handler.on_barrier(0, checkpoint_id)
        assert listener.snapshots == [1, 2, 3]
        assert listener.aborts == []


# --------------------------------------------------------------------------- at least once


class TestAtLeastOnce:
    def test_no_channel_is_ever_blocked(self) -> None:
        listener = RecordingListener()
        handler = AtLeastOnceBarrierHandler(channels=3, listener=listener)
        handler.on_barrier(0, 1)
        assert handler.blocked == frozenset()
        handler.on_barrier(1, 1)
        assert handler.blocked == frozenset()

    def test_the_snapshot_follows_the_last_barrier(self) -> None:
        listener = RecordingListener()
        handler = AtLeastOnceBarrierHandler(channels=3, listener=listener)
        handler.on_barrier(2, 1)
        handler.on_barrier(0, 1)
        assert listener.snapshots == []
        handler.on_barrier(1, 1)
        assert listener.snapshots == [1]

    def test_end_of_partition_counts_as_a_barrier(self) -> None:
        listener = RecordingListener()
        handler = AtLeastOnceBarrierHandler(channels=2, listener=listener)
        handler.on_barrier(0, 4)
        handler.on_end_of_partition(1)
        assert listener.snapshots == [4]

    def test_a_newer_barrier_abandons_the_older_checkpoint(self) -> None:
        listener = RecordingListener()
        handler = AtLeastOnceBarrierHandler(channels=2, listener=listener)
        handler.on_barrier(0, 1)
        handler.on_barrier(0, 2)
        handler.on_barrier(1, 1)
        assert listener.aborts == [(1, False)]
        handler.on_barrier(1, 2)
        assert listener.snapshots == [2]

    def test_a_cancel_marker_aborts(self) -> None:
        listener = RecordingListener()
        handler = AtLeastOnceBarrierHandler(channels=2, listener=listener)
        handler.on_barrier(0, 1)
        handler.on_cancel(1, 1)
        handler.on_barrier(1, 1)
        assert listener.aborts == [(1, True)]
        assert listener.snapshots == []


# --------------------------------------------------------------------------- unaligned


class TestUnaligned:
    def test_the_first_barrier_snapshots_at_once_without_blocking(self) -> None:
        listener = RecordingListener()
        handler = UnalignedBarrierHandler(channels=3, listener=listener)
        handler.on_priority_barrier(1, 1, [])
        assert listener.snapshots == [1]
        assert handler.blocked == frozenset()
        assert listener.channel_states == []

    def test_in_flight_data_of_each_channel_becomes_its_channel_state(self) -> None:
        listener = RecordingListener()
        handler = UnalignedBarrierHandler(channels=3, listener=listener)
        # Channel 0's barrier overtakes two queued buffers.
        handler.on_priority_barrier(0, 7, [rows(1, 2), rows(3)])
        # The task goes on: buffers of channels whose barrier has not arrived are
        # in flight for checkpoint 7; buffers after a channel's barrier are not.
        handler.on_data(1, rows(10))
        handler.on_data(0, rows(4))
        handler.on_priority_barrier(1, 7, [rows(11)])
        handler.on_data(1, rows(12))
        handler.on_data(2, rows(20, 21))
        assert listener.channel_states == []
        handler.on_priority_barrier(2, 7, [])

        assert listener.snapshots == [7]
        assert len(listener.channel_states) == 1
        checkpoint_id, state = listener.channel_states[0]
        assert checkpoint_id == 7
        assert values_of(state[0]) == [1, 2, 3]
        assert values_of(state[1]) == [10, 11]
        assert values_of(state[2]) == [20, 21]

    def test_a_closed_channel_completes_the_channel_state(self) -> None:
        listener = RecordingListener()
        handler = UnalignedBarrierHandler(channels=2, listener=listener)
        handler.on_priority_barrier(0, 1, [rows(1)])
        handler.on_data(1, rows(2))
        handler.on_end_of_partition(1)
        assert [cid for cid, _ in listener.channel_states] == [1]
        state = listener.channel_states[0][1]
        assert values_of(state[0]) == [1]
        assert values_of(state[1]) == [2]

    def test_a_newer_barrier_aborts_the_unfinished_checkpoint(self) -> None:
        listener = RecordingListener()
        handler = UnalignedBarrierHandler(channels=2, listener=listener)
        handler.on_priority_barrier(0, 1, [])
        handler.on_priority_barrier(0, 2, [rows(5)])
        assert listener.snapshots == [1, 2]
        assert listener.aborts == [(1, False)]
        handler.on_priority_barrier(1, 1, [])  # late barrier of the aborted one
        assert listener.channel_states == []
        handler.on_priority_barrier(1, 2, [])
        assert [cid for cid, _ in listener.channel_states] == [2]

    def test_a_cancel_marker_drops_the_collected_channel_state(self) -> None:
        listener = RecordingListener()
        handler = UnalignedBarrierHandler(channels=2, listener=listener)
        handler.on_priority_barrier(0, 1, [rows(1)])
        handler.on_cancel(1, 1)
        handler.on_priority_barrier(1, 1, [])
        assert listener.aborts == [(1, True)]
        assert listener.channel_states == []


class TestUnalignedFinalCheckpoint:
    """The final barrier is aligned: what it overtook would never be committed."""

    def test_the_final_barrier_blocks_its_channel_until_every_channel_delivered_it(
            self) -> None:
        listener = RecordingListener()
        handler = UnalignedBarrierHandler(channels=3, listener=listener)
        handler.on_final_barrier(0, 9)
        assert handler.blocked == frozenset({0})
        assert listener.snapshots == []
        handler.on_final_barrier(2, 9)
        assert handler.blocked == frozenset({0, 2})
        handler.on_data(1, rows(1))   # processed before the snapshot, so in its state
        handler.on_final_barrier(1, 9)

        assert listener.snapshots == [9]
        assert handler.blocked == frozenset()
        assert listener.channel_states == []

    def test_a_channel_that_ended_counts_as_aligned(self) -> None:
        listener = RecordingListener()
        handler = UnalignedBarrierHandler(channels=2, listener=listener)
        handler.on_final_barrier(0, 3)
        handler.on_end_of_partition(1)
        assert listener.snapshots == [3]
        assert handler.blocked == frozenset()

    def test_the_final_barrier_subsumes_an_unfinished_unaligned_checkpoint(self) -> None:
        listener = RecordingListener()
        handler = UnalignedBarrierHandler(channels=2, listener=listener)
        handler.on_priority_barrier(0, 4, [rows(1)])
        handler.on_final_barrier(0, 5)
        assert listener.aborts == [(4, False)]
        handler.on_priority_barrier(1, 4, [])   # late: ignored
        handler.on_final_barrier(1, 5)
        assert listener.snapshots == [4, 5]
        assert listener.channel_states == []

    def test_a_cancel_of_the_final_checkpoint_releases_the_blocked_channels(self) -> None:
        listener = RecordingListener()
        handler = UnalignedBarrierHandler(channels=2, listener=listener)
        handler.on_final_barrier(0, 6)
        handler.abort_pending(6, reason="expired")
        assert handler.blocked == frozenset()
        assert listener.aborts == [(6, True)]
        handler.on_final_barrier(1, 6)
        assert listener.snapshots == []

    @pytest.mark.parametrize("handler_type", [AlignedBarrierHandler, AtLeastOnceBarrierHandler])
    def test_other_handlers_treat_it_as_an_ordinary_barrier(self, handler_type: type) -> None:
        listener = RecordingListener()
        handler = handler_type(channels=2, listener=listener)
        handler.on_final_barrier(0, 2)
        handler.on_final_barrier(1, 2)
        assert listener.snapshots == [2]


@pytest.mark.parametrize(("mode", "unaligned", "expected"), [
    (CheckpointMode.EXACTLY_ONCE, False, AlignedBarrierHandler),
    (CheckpointMode.EXACTLY_ONCE, True, UnalignedBarrierHandler),
    (CheckpointMode.AT_LEAST_ONCE, False, AtLeastOnceBarrierHandler),
    (CheckpointMode.AT_LEAST_ONCE, True, AtLeastOnceBarrierHandler),
])
def test_the_checkpoint_mode_selects_the_handler(mode: CheckpointMode, unaligned: bool,
                                                 expected: type) -> None:
    handler = build_barrier_handler(mode=mode, unaligned=unaligned, channels=2,
                                    listener=RecordingListener())
    assert isinstance(handler, expected)
