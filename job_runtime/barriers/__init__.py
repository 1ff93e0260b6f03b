"""Barrier handlers: how a task with several input channels reacts to checkpoint barriers.

* :class:`AlignedBarrierHandler` (exactly once): a channel that delivered barrier
  ``n`` is blocked until every open channel delivered it; then the task snapshots.
* :class:`AtLeastOnceBarrierHandler`: nothing is blocked; the task snapshots once
  every open channel delivered barrier ``n``. Records after the barrier on a fast
  channel are in the snapshot's state and will be replayed: duplicates, no loss.
* :class:`UnalignedBarrierHandler` (exactly once): the first barrier overtakes the
  queued data and the task snapshots at once; the data that was in flight before
  each channel's barrier is persisted as channel state and replayed on restore.
"""

from cjob_spec.model import CheckpointMode
from job_runtime.barriers.aligned import AlignedBarrierHandler
from job_runtime.barriers.at_least_once import AtLeastOnceBarrierHandler
from job_runtime.barriers.handler import BarrierHandler, BarrierListener
from job_runtime.barriers.unaligned import UnalignedBarrierHandler

__all__ = [
    "AlignedBarrierHandler",
    "AtLeastOnceBarrierHandler",
    "BarrierHandler",
    "BarrierListener",
    "UnalignedBarrierHandler",
    "build_barrier_handler",
]


def build_barrier_handler(*, mode: CheckpointMode, unaligned: bool, channels: int,
                          listener: BarrierListener) -> BarrierHandler:
    if mode is CheckpointMode.AT_LEAST_ONCE:
        return AtLeastOnceBarrierHandler(channels=channels, listener=listener)
    if unaligned:
        return UnalignedBarrierHandler(channels=channels, listener=listener)
    return AlignedBarrierHandler(channels=channels, listener=listener)
