"""A checkpoint between its trigger and its end (Flink's ``PendingCheckpoint``).

It owns its acknowledgements: it knows which tasks (a task is one stage of one
subtask) it still waits for, folds each acknowledgement's statistics into its
:class:`~job_runtime.coordinator.stats.CheckpointStats`, says when the last task
acknowledged, and builds the checkpoint's ``_metadata`` from the acknowledgements'
parts. The coordinator only decides what happens to it (commit, abort, expiry), under
its lock; nothing here locks or calls storage.
"""

from __future__ import annotations

import dataclasses

from cjob_checkpoint.fields import Json
from cjob_checkpoint.metadata import (
    ChannelStateHandle,
    CheckpointMetadata,
    KeyedStateHandle,
    OperatorDescriptor,
    SinkTransactions,
)
from job_runtime.coordinator.messages import Ack
from job_runtime.coordinator.stats import CheckpointStats

Task = tuple[int, int]
"""A task: (stage, subtask)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobShape:
    """What every checkpoint's ``_metadata`` says of the job besides its state."""

    job_id: str
    attempt: int
    parallelism: int
    max_parallelism: int
    stages: int
    pipeline: tuple[OperatorDescriptor, ...] = ()
    """The job's keyed operators, written into every checkpoint's metadata."""

    def tasks(self) -> set[Task]:
        return {(stage, subtask) for stage in range(self.stages)
                for subtask in range(self.parallelism)}


class PendingCheckpoint:
    """A triggered checkpoint that waits for the acknowledgement of every task."""

    def __init__(self, *, checkpoint_id: int, final: bool, triggered_at: float,
                 triggered_mono: float, tasks: set[Task], nonce: str | None = None,
                 suspends: bool = False) -> None:
        self.checkpoint_id = checkpoint_id
        self.final = final
        self.triggered_at = triggered_at
        """Wall-clock time of the trigger: the checkpoint's timestamp."""
        self.triggered_mono = triggered_mono
        """Monotonic time of the trigger: its duration and expiry are measured from it."""
        self.nonce = nonce
        """The manual request this checkpoint serves, if any."""
        self.suspends = suspends
        """It serves a suspend request: the job stops once it completed and was committed."""
        self.completing = False
        """Every task acknowledged: the commit is queued or under way and only it may end this."""
        self.stats = CheckpointStats(checkpoint_id=checkpoint_id, triggered_at=triggered_at,
                                     final=final)
        self._waiting = set(tasks)
        self._acks: dict[Task, Ack] = {}

    def acknowledge(self, ack: Ack) -> bool:
        """Record a task's acknowledgement; ``True`` once, when it was the last one the
        checkpoint waited for (the checkpoint is then ``completing``)."""
        task = (ack.stage, ack.subtask)
        self._waiting.discard(task)
        self._acks[task] = ack
        stats = self.stats
        stats.acks += 1
        stats.size_bytes += ack.stats.bytes
        stats.alignment_ms_max = max(stats.alignment_ms_max, ack.stats.alignment_ms)
        stats.sync_ms_max = max(stats.sync_ms_max, ack.stats.sync_ms)
        stats.async_ms_max = max(stats.async_ms_max, ack.stats.async_ms)
        if self._waiting or self.completing:
            return False
        self.completing = True
        return True

    def expired(self, *, now_mono: float, timeout: float) -> bool:
        """Past ``timeout`` and not completing: a commit under way decides by itself (the
        store's calls have their own timeouts)."""
        return not self.completing and now_mono - self.triggered_mono > timeout

    def metadata(self, job: JobShape) -> CheckpointMetadata:
        """``_metadata`` of a checkpoint every task acknowledged: the acks' parts, merged."""
        sources: dict[int, Json] = {}
        operators: dict[str, list[KeyedStateHandle]] = {}
        channels: dict[int, list[ChannelStateHandle]] = {}
        sinks: list[SinkTransactions] = []
        for (stage, subtask), ack in sorted(self._acks.items()):
            state = ack.state
            for split, position in state.sources.items():
                sources[int(split)] = position
            for uid, operator in state.operators.items():
                operators.setdefault(uid, []).append(KeyedStateHandle(
                    subtask=subtask, handle=operator.handle, key_groups=operator.key_groups,
                    shared=operator.shared))
            if state.channels is not None:
                channels.setdefault(stage, []).append(
                    ChannelStateHandle(subtask=subtask, handle=state.channels))
            for name, transactions in sorted(state.sinks.items()):
                if transactions is not None:
                    sinks.append(SinkTransactions(sink=name, subtask=subtask,
                                                  pending=transactions))
        return CheckpointMetadata(
            job=job.job_id, checkpoint_id=self.checkpoint_id, timestamp=self.triggered_at,
            final=self.final, attempt=job.attempt, parallelism=job.parallelism,
            max_parallelism=job.max_parallelism, sources=sources,
            operators={uid: tuple(handles) for uid, handles in operators.items()},
            channels={stage: tuple(handles) for stage, handles in channels.items()},
            sinks=tuple(sinks), pipeline=job.pipeline)
