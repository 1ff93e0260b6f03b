"""A keyed task: one stage after each ``key_by``. It reads the records of its key
groups from the previous stage's channels, through a barrier handler that aligns (or
lets overtake) the checkpoints' barriers, runs its keyed operator and the record
functions after it, fires the operator's timers on watermarks and processing time,
and restores the operator's state of its key groups from a checkpoint.
"""

from __future__ import annotations

import logging
import pickle
import time
from typing import Any

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata
from cjob_checkpoint.storage.factory import get_filesystem
from cjob_spec.model import CheckpointMode, StateBackend
from job_runtime.barriers import BarrierHandler, build_barrier_handler
from job_runtime.coordinator.messages import Abort
from job_runtime.execution.subtask.task import Control, Task
from job_runtime.execution.subtask.uploader import UploadJob
from job_runtime.execution.subtask.watermark_tracking import ChannelWatermarks
from job_runtime.network.channels import InputGate
from job_runtime.network.framing import Kind
from job_runtime.operators.accumulators import kind_of_columns
from job_runtime.operators.keyed import build_keyed_operator
from job_runtime.operators.keyed_operator import KeyedOperator
from job_runtime.records import (
    Batch,
    key_group_of,
    key_group_range,
    key_of,
)
from job_runtime.sources.source_contract import SourceContext
from job_runtime.state.backend import BackendKind, StateBackendSettings
from job_runtime.state.rocksdb_format import with_shared_files

log = logging.getLogger(__name__)


class KeyedTask(Task):
    def __init__(self, *, gate: InputGate, restore: CheckpointMetadata | None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        config = self.runtime.config
        assert self.plan.keyed is not None
        self.keyed_op = self.plan.keyed
        self.key_groups = key_group_range(self.runtime.subtask, parallelism=config.parallelism,
                                          max_parallelism=config.max_parallelism)
        self.operator: KeyedOperator = build_keyed_operator(
            op=self.keyed_op, subtask=self.runtime.subtask, key_groups=self.key_groups,
            max_parallelism=config.max_parallelism, state=self._state_settings())
        self.gate = gate
        self.handler: BarrierHandler = build_barrier_handler(
            mode=config.mode, unaligned=config.unaligned, channels=gate.size, listener=self)
        self.watermarks = ChannelWatermarks(channels=gate.size)
        self.event_watermark: int | None = None
        """The watermark this task reached (reported as progress); ``None`` before one."""
        self._replay: list[Batch] = []
        self._deferred: dict[int, UploadJob] = {}
        if restore is not None:
            started = time.perf_counter()
            self._restore(restore)
            self.restore_seconds = time.perf_counter() - started

    def _state_settings(self) -> StateBackendSettings:
        """The job's backend; storage too, whichever it is: a restore reads the shared
        files of a ``rocksdb`` checkpoint even into ``hashmap`` (a changed backend)."""
        config = self.runtime.config
        storage = CheckpointStorage(
            config.checkpoint_root, config.job_id,
            fs=get_filesystem(config.checkpoint_root, s3=self.runtime.s3_config))
        kind: BackendKind = ("rocksdb" if config.state_backend is StateBackend.ROCKSDB
                             else "hashmap")
        return StateBackendSettings(kind=kind, local_dir=config.state_dir, storage=storage)

    def on_complete(self, checkpoint_id: int, final: bool) -> None:
        self.operator.notify_complete(checkpoint_id)
        super().on_complete(checkpoint_id, final)

    # -- restore

    def _restore(self, restore: CheckpointMetadata) -> None:
        blobs = [with_shared_files(self.runtime.read_state(found.handle), found.shared)
                 for found in restore.keyed_state_files(self.keyed_op.uid,
                                                        key_groups=self.key_groups)]
        restored = self.operator.restore(blobs)
        log.info("subtask %d restored %d keys of %s", self.runtime.subtask, restored,
                 self.keyed_op.uid)
        key = self.keyed_op.key.key
        max_p = self.runtime.config.max_parallelism
        for handle in restore.channel_state(self.plan.index):
            data = self.runtime.read_state(handle)
            for row_lists in pickle.loads(data).values():
                for rows in row_lists:
                    mine = [r for r in rows
                            if key_group_of(key_of(r, key), max_p) in self.key_groups]
                    if mine:
                        # Kept as plain rows: their columns say whether they were
                        # records or a combiner's partial aggregates.
                        self._replay.append(Batch(rows=mine,
                                                  kind=kind_of_columns(mine[0].keys())))

    # -- snapshots

    def operator_snapshots(self) -> dict[str, tuple[Any, list[int]]]:
        return {self.keyed_op.uid: (self.operator.snapshot(),
                                    [self.key_groups.start, self.key_groups.stop])}

    def on_snapshot(self, checkpoint_id: int, *, alignment_seconds: float) -> None:
        config = self.runtime.config
        unaligned = (config.unaligned and config.mode is CheckpointMode.EXACTLY_ONCE
                     and checkpoint_id not in self.final_checkpoints)
        job = self.snapshot(checkpoint_id, alignment_seconds=alignment_seconds,
                            defer_ack=unaligned)
        if unaligned:
            self._deferred = {checkpoint_id: job}

    def on_channel_state(self, checkpoint_id: int, state: dict[int, list[Batch]]) -> None:
        job = self._deferred.pop(checkpoint_id, None)
        if job is not None:
            job.channel_state = state
            self.runtime.submit_snapshot(job)

    def on_abort(self, checkpoint_id: int, *, reason: str, forward_cancel: bool) -> None:
        self._deferred.pop(checkpoint_id, None)
        if forward_cancel:
            self.broadcast(Kind.CANCEL, checkpoint_id)
        # Without a cancel to forward, a newer barrier subsumed the checkpoint: a
        # newer one is under way, so this is no failure of the job's checkpointing.
        self.runtime.decline(checkpoint_id, reason, subsumed=not forward_cancel)

    def handle_control(self, message: Control) -> None:
        match message:
            case Abort(checkpoint_id=checkpoint_id, reason=reason):
                self.handler.abort_pending(checkpoint_id, reason=reason)
            case _:
                super().handle_control(message)

    # -- processing

    def process(self, batch: Batch) -> None:
        self._mark_records_seen()
        self.records_in += len(batch)
        self.emit(self.operator.process(batch))
        self.emit_side_outputs()
        self.last_record_at = time.time()

    def emit_side_outputs(self) -> None:
        """What the operator routed aside, through its branch to the branch's sink
        (a tag no branch reads is dropped)."""
        side = self.operator.side
        if not side:
            return
        for tag, batches in side.take().items():
            branch = self.branches.get(tag)
            if branch is None:
                continue
            for batch in batches:
                out = branch.chain(batch)
                if len(out):
                    branch.writer.write(out)
                    self.records_out += len(out)

    def on_watermark(self, watermark: int | None) -> None:
        """Event time moved to ``watermark`` (``None``: it did not): what the operator
        fires goes out first, then the watermark, behind it."""
        if watermark is None:
            return
        self.event_watermark = watermark
        fired = self.operator.on_watermark(watermark)
        if len(fired):
            self.emit(fired)
        self.emit_side_outputs()
        if self.outputs:
            self.flush_combiner()
            self.broadcast(Kind.WATERMARK, watermark)

    def on_processing_time(self) -> None:
        """Processing-time timers due now fire (and TTL sweeps run) between batches:
        on the task thread, never inside a batch or a barrier's alignment step."""
        fired = self.operator.on_processing_time(time.time_ns() // 1_000_000)
        if len(fired):
            self.emit(fired)
        self.emit_side_outputs()

    def _table_context(self) -> SourceContext:
        """The context an operator reads a table of its own in: that of the only
        subtask, so the table's source hands it every split."""
        config = self.runtime.config
        return SourceContext(subtask=0, parallelism=1, staging_uri=config.staging_uri,
                             job_id=config.job_id, s3=self.runtime.s3_config,
                             staged_inputs=config.staged_inputs)

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.operator.close()

    def loop(self) -> None:
        self.operator.open(sources=self._table_context(), cancelled=self.runtime.is_cancelled)
        for batch in self._replay:
            self.process(batch)
        self._replay = []
        handler = self.handler
        gate = self.gate
        while not self.finished:
            if not self.goes_on():
                return
            priority = gate.take_priority_barrier()
            if priority is not None:
                channel, checkpoint_id, ahead = priority
                handler.on_priority_barrier(channel, checkpoint_id, ahead)
                continue
            self.on_processing_time()
            item = gate.next(blocked=handler.blocked, timeout=0.05)
            if item is None:
                self.flush_if_due()
                continue
            channel, (kind, arg, payload) = item
            if payload is not None:
                handler.on_data(channel, payload)
                self.watermarks.on_data(channel)
                self.process(payload)
            elif kind == Kind.WATERMARK:
                self.on_watermark(self.watermarks.on_watermark(channel, arg))
            elif kind == Kind.IDLE:
                self.on_watermark(self.watermarks.on_idle(channel))
                if self.watermarks.all_idle:
                    self.broadcast(Kind.IDLE, 0)
            elif kind == Kind.BARRIER:
                handler.on_barrier(channel, arg)
            elif kind == Kind.FINAL_BARRIER:
                self.final_checkpoints.add(arg)
                handler.on_final_barrier(channel, arg)
            elif kind == Kind.CANCEL:
                handler.on_cancel(channel, arg)
            elif kind == Kind.END:
                # Not the end of event time: a channel ends only after the final
                # checkpoint, which a bounded input's last watermark preceded and a
                # suspend's windows must stay open through.
                handler.on_end_of_partition(channel)
