"""The tasks of one subtask: a source task and one keyed task per exchange.

Each task is a thread. A task processes control messages from the coordinator
between batches (checkpoint triggers for sources; aborts and completions for
everyone), so a checkpoint never interrupts a record function halfway.

A task writes to the sinks of its stage: the main sink in the last stage, and the
sinks of the side outputs of its keyed operator (branches). It pre-commits all of
them at each barrier and commits all of them when the checkpoint completes, so each
sink of the job is exactly-once in the same checkpoints.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata
from cjob_checkpoint.storage.factory import get_filesystem
from job_runtime.barriers import BarrierHandler, build_barrier_handler
from job_runtime.coordinator.messages import Abort, Complete, ToSubtask, Trigger
from job_runtime.errors import UserCodeError
from job_runtime.execution.stages import StagePlan
from job_runtime.execution.subtask.recent import RecentIds
from job_runtime.execution.subtask.split_discovery import SplitDiscovery
from job_runtime.execution.subtask.task_context import TaskContext
from job_runtime.execution.subtask.uploader import UploadJob
from job_runtime.execution.subtask.watermark_tracking import ChannelWatermarks, SplitWatermarks
from job_runtime.faults import maybe_fail
from job_runtime.network.channels import InputGate, OutputChannel
from job_runtime.network.framing import Kind
from job_runtime.operators.accumulators import partial_key_groups
from job_runtime.operators.base import KeyedOperator
from job_runtime.operators.chain import RecordChain
from job_runtime.operators.combiner import Combiner
from job_runtime.operators.keyed import build_keyed_operator
from job_runtime.operators.window_combiner import WindowCombiner
from job_runtime.pipeline import KeyedKind
from job_runtime.records import (
    Batch,
    key_group_of,
    key_group_range,
    key_of,
    split_by_target,
)
from job_runtime.sinks.base import MAIN_SINK, SinkWriter
from job_runtime.sources.base import (
    RestoredSplit,
    Source,
    SourceBacklog,
    SourceContext,
    Split,
    SplitReader,
)
from job_runtime.sources.union import input_of
from job_runtime.state.backend import BackendKind, StateBackendSettings
from job_runtime.state.rocksdb_format import with_shared_files
from job_runtime.watermarks import MAX_WATERMARK, WatermarkStrategy, event_times

log = logging.getLogger(__name__)

Control = ToSubtask


@dataclasses.dataclass(frozen=True, kw_only=True)
class BranchOutput:
    """A side output the pipeline reads: its record functions and its sink's writer."""

    tag: str
    chain: RecordChain
    sink_name: str
    writer: SinkWriter

WATERMARK_INTERVAL_SECONDS = 0.2
"""How often a source task sends its watermark at most (Flink's default periodic
interval): each send flushes the combiner in front of a windowed aggregate, which
a watermark per batch would keep from combining much. Also how often a task
without new records looks whether its splits went idle."""


IDLE_WAIT_SECONDS = 0.1
"""How long a source task with nothing to read (its input ended, or it holds no split
of an unbounded source yet) waits for a control message before it looks again."""


class Task(threading.Thread):
    def __init__(self, *, runtime: TaskContext, plan: StagePlan,
                 outputs: list[OutputChannel], sink: SinkWriter | None,
                 sink_name: str = MAIN_SINK, branches: tuple[BranchOutput, ...] = ()) -> None:
        super().__init__(daemon=True, name=f"task-{plan.index}-{runtime.subtask}")
        self.runtime = runtime
        self.plan = plan
        self.outputs = outputs
        self.sink = sink
        self.branches = {branch.tag: branch for branch in branches}
        self.sinks: dict[str, SinkWriter] = {} if sink is None else {sink_name: sink}
        """Every sink this task writes, by name: pre-committed and committed together."""
        for branch in branches:
            self.sinks[branch.sink_name] = branch.writer
        self.chain = RecordChain(ops=plan.chain, subtask=runtime.subtask)
        self.combiner: Combiner | WindowCombiner | None = None
        if plan.combine is not None:
            self.combiner = WindowCombiner(op=plan.combine, subtask=runtime.subtask) \
                if plan.combine.kind == KeyedKind.WINDOW_AGGREGATE else Combiner(op=plan.combine)
        self.control: queue.Queue[Control] = queue.Queue()
        self.error: BaseException | None = None
        self.finished = False
        self.records_in = 0
        self.records_out = 0
        # Wall-clock times of the first and latest batch a source read or a keyed task
        # processed (reported with progress: the driver's first_record and last_record
        # milestones, from which the benchmarks and tests read throughput and recovery).
        self.first_record_at: float | None = None
        self.last_record_at: float | None = None
        self.restore_seconds: float | None = None
        # Checkpoints in flight whose barrier this task emitted (settled ones are
        # forgotten, so a job with thousands of checkpoints keeps a handful here).
        self.emitted_barriers = RecentIds()
        # Ids of final checkpoints seen here: their barriers travel as FINAL_BARRIER,
        # which downstream unaligned tasks align instead of letting it overtake data.
        self.final_checkpoints = RecentIds()
        self._cancelled: Callable[[], bool] = runtime.is_cancelled

    # ------------------------------------------------------------------ output

    def _mark_records_seen(self) -> None:
        now = time.time()
        if self.first_record_at is None:
            self.first_record_at = now
        self.last_record_at = now

    def emit(self, batch: Batch) -> None:
        batch = self.chain(batch)
        if not len(batch):
            return
        if self.sink is not None:
            self.sink.write(batch)
            self.records_out += len(batch)
            return
        if self.combiner is not None:
            self.combiner.add(batch)
            if self.combiner.due():
                self.flush_combiner()
            return
        self._send(batch)

    def _send(self, batch: Batch, *, groups: np.ndarray | None = None) -> None:
        key = self.plan.out_key
        assert key is not None
        config = self.runtime.config
        for target, part in split_by_target(batch, key.key, parallelism=config.parallelism,
                                            max_parallelism=config.max_parallelism,
                                            groups=groups):
            self.outputs[target].send_batch(part, cancelled=self._cancelled)

    def flush_combiner(self) -> None:
        """Send the combiner's partial aggregates; before every barrier and at the end."""
        if self.combiner is None:
            return
        try:
            partial = self.combiner.flush()
        except Exception as exc:
            raise UserCodeError(operator=self.plan.combine.uid if self.plan.combine else "",
                                subtask=self.runtime.subtask,
                                details="".join(traceback.format_exception(exc))) from exc
        if partial is not None:
            # The combiner hashed string keys once: their key groups come with them.
            self._send(partial, groups=partial_key_groups(
                partial.arrow, self.runtime.config.max_parallelism))

    def flush_if_due(self) -> None:
        """The combiner's latency bound, checked while the task waits for input."""
        if self.combiner is not None and self.combiner.due():
            self.flush_combiner()

    def broadcast(self, kind: Kind, arg: int) -> None:
        for out in self.outputs:
            out.send_event(kind, arg)

    # ------------------------------------------------------------------ snapshots

    def operator_snapshots(self) -> dict[str, tuple[Any, list[int]]]:
        return {}

    def source_positions(self) -> dict[str, Any]:
        return {}

    def snapshot(self, checkpoint_id: int, *, alignment_seconds: float,
                 defer_ack: bool = False) -> UploadJob:
        started = time.perf_counter()
        job = UploadJob(
            checkpoint_id=checkpoint_id, stage=self.plan.index, subtask=self.runtime.subtask,
            snapshots=self.operator_snapshots(), sources=self.source_positions(),
            # Only the synchronous part of the sinks' pre-commits: the uploader makes
            # them durable before it acknowledges the checkpoint.
            sinks={name: writer.begin_snapshot(checkpoint_id)
                   for name, writer in self.sinks.items()},
            channel_state=None, channel_uid=f"{self.plan.uid}-channels",
            stats={"sync_ms": (time.perf_counter() - started) * 1000.0,
                   "alignment_ms": alignment_seconds * 1000.0})
        final = checkpoint_id in self.final_checkpoints
        # Records read before this snapshot reach the next stage before its barrier.
        self.flush_combiner()
        self.broadcast(Kind.FINAL_BARRIER if final else Kind.BARRIER, checkpoint_id)
        self.emitted_barriers.add(checkpoint_id)
        maybe_fail("subtask.after-snapshot", checkpoint_id)
        if not defer_ack:
            self.runtime.submit_snapshot(job)
        return job

    # ------------------------------------------------------------------ control

    def on_complete(self, checkpoint_id: int, final: bool) -> None:
        self.emitted_barriers.discard_through(checkpoint_id)
        for writer in self.sinks.values():
            # Raises when the final commit fails for good: the task fails, and with
            # it the attempt, so the job never ends with uncommitted output.
            writer.notify_complete(checkpoint_id, final=final)
        if final:
            self.finish()

    def finish(self) -> None:
        self.flush_combiner()
        for out in self.outputs:
            try:
                out.send_event(Kind.END, 0)
            except Exception:
                pass
        self.finished = True

    def handle_control(self, message: Control) -> None:
        match message:
            case Complete(checkpoint_id=checkpoint_id, final=final):
                self.on_complete(checkpoint_id, final)
            case _:
                pass

    def drain_control(self) -> None:
        while True:
            try:
                message = self.control.get_nowait()
            except queue.Empty:
                return
            self.handle_control(message)

    # ------------------------------------------------------------------ thread

    def run(self) -> None:
        try:
            self.loop()
        except BaseException as exc:
            self.error = exc
            self.runtime.task_failed(exc)

    def loop(self) -> None:
        raise NotImplementedError


class SourceTask(Task):
    def __init__(self, *, source: Source, restore: CheckpointMetadata | None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source
        config = self.runtime.config
        self.context = SourceContext(subtask=self.runtime.subtask,
                                     parallelism=config.parallelism,
                                     staging_uri=config.staging_uri,
                                     job_id=config.job_id,
                                     s3=self.runtime.s3_config,
                                     batch_size=self.plan.source_batch_size,
                                     columns=self.plan.source_columns,
                                     staged_inputs=config.staged_inputs)
        listed = source.splits(context=self.context)
        if restore is None:
            restored = [RestoredSplit(split=split, position=None) for split in listed]
        else:
            # The checkpoint's positions, matched to what the source lists now, and
            # the splits only the checkpoint knows (found by an earlier attempt's
            # discovery, or renumbered by a new plan) rebuilt from them: none of them
            # is missing from the next checkpoint, none is read twice.
            restored = source.restore_splits(listed, restore.sources, context=self.context)
        all_splits = [found.split for found in restored]
        self.splits: list[Split] = [s for s in all_splits if self._owns(s)]
        self.positions: dict[int, Any] = {
            found.split.index: (source.start_position(found.split) if found.position is None
                                else found.position)
            for found in restored if self._owns(found.split)}
        self._unopened: list[Split] = list(self.splits)
        self._open: list[tuple[Split, SplitReader]] = []
        self._turn = 0
        self._completed_positions: dict[int, dict[str, Any]] = {}
        """Checkpoint id -> the positions it holds, until it completes or is aborted."""
        strategy = self.plan.watermarks
        self._watermarks = None if strategy is None else SplitWatermarks(
            strategy=strategy, strategy_of=self._strategy_of if self.plan.input_watermarks
            else None)
        self._input_chains = [RecordChain(ops=ops, subtask=self.runtime.subtask)
                              for ops in self.plan.input_chains]
        """A union's record functions per input, applied before the common chain."""
        self._batch_split = -1
        self._watermark_checked = 0.0
        self._sent_idle = False
        interval = source.discovery_interval
        self._discovery = None if not interval else SplitDiscovery(
            source=source, context=self.context, interval=interval,
            known=[s.index for s in all_splits])
        self.exhausted = False
        self.final_barrier: int | None = None
        """A final checkpoint whose barrier this task sent before its input ended (a
        suspend), while it is in flight: nothing is read after it, as the next attempt
        reads it again; an abort of that checkpoint lets reading go on."""

    def _strategy_of(self, split: int) -> WatermarkStrategy:
        """A union's input's own strategy (every input of a union with event time has one)."""
        strategy = self.plan.input_watermarks[input_of(split)]
        assert strategy is not None
        return strategy

    def _owns(self, split: Split) -> bool:
        return split.index % self.runtime.config.parallelism == self.runtime.subtask

    def _add_discovered(self) -> None:
        """Splits the discovery thread found since the last batch, ours read next."""
        if self._discovery is None:
            return
        for split in self._discovery.found():
            if self._owns(split) and split.index not in self.positions:
                log.info("subtask %d reads a new split %d of source %r: %s",
                         self.runtime.subtask, split.index, self.source.name,
                         split.description)
                self.splits.append(split)
                self.positions[split.index] = self.source.start_position(split)
                self._unopened.append(split)

    def backlog(self) -> list[SourceBacklog]:
        """The lag of the open readers that know theirs (read by the progress thread)."""
        found = []
        for _, reader in list(self._open):
            lag = reader.backlog()
            if lag is not None:
                found.append(lag)
        return found

    def _positions(self) -> dict[int, Any]:
        current = dict(self.positions)
        for split, reader in self._open:
            current[split.index] = reader.position()
        return current

    def source_positions(self) -> dict[str, Any]:
        return {str(k): v for k, v in self._positions().items()}

    def handle_control(self, message: Control) -> None:
        match message:
            case Trigger(checkpoint_id=checkpoint_id, final=final):
                if final:
                    self.final_checkpoints.add(checkpoint_id)
                    self.final_barrier = checkpoint_id
                job = self.snapshot(checkpoint_id, alignment_seconds=0.0)
                self._completed_positions[checkpoint_id] = job.sources
            case Abort(checkpoint_id=checkpoint_id):
                self._completed_positions.pop(checkpoint_id, None)
                if checkpoint_id == self.final_barrier:
                    self.final_barrier = None
                if checkpoint_id in self.emitted_barriers:
                    self.emitted_barriers.discard(checkpoint_id)
                    self.broadcast(Kind.CANCEL, checkpoint_id)
            case _:
                super().handle_control(message)

    def on_complete(self, checkpoint_id: int, final: bool) -> None:
        positions = self._completed_positions.pop(checkpoint_id, None)
        for older in [c for c in self._completed_positions if c < checkpoint_id]:
            del self._completed_positions[older]
        if positions is not None:
            for split, reader in self._open:
                if str(split.index) in positions:
                    reader.checkpoint_completed(positions[str(split.index)])
        super().on_complete(checkpoint_id, final)

    def _next_to_open(self) -> Split | None:
        """The next split to open: any of a source that reads its splits together,
        else the next of an input that has none open (one reader per input of a
        union, so that each input's time moves along with the others' and an input
        that never ends does not keep the others waiting)."""
        source = self.source
        busy = {input_of(split.index) for split, _ in self._open}
        return next((s for s in self._unopened
                     if source.reads_together(s.index) or input_of(s.index) not in busy), None)

    def _next_batch(self) -> Batch | None:
        """The next batch of the open readers in turn (one reader at a time, per input,
        unless the source reads its splits together); an empty batch when every open
        reader had nothing, or when this subtask holds no split of an unbounded
        source (it may gain one at any time); ``None`` once every split of a bounded
        source ended."""
        while True:
            while (split := self._next_to_open()) is not None:
                self._unopened.remove(split)
                self._open.append((split, self.source.open(split, self.positions[split.index],
                                                           context=self.context)))
                if self._watermarks is not None:
                    # Only splits being read hold time back, not those waiting their turn.
                    self._watermarks.add_split(split.index)
            if not self._open:
                return Batch(rows=[]) if self.source.unbounded else None
            idle: Batch | None = None
            for _ in range(len(self._open)):
                index = self._turn % len(self._open)
                split, reader = self._open[index]
                batch = reader.read_batch()
                if batch is None:
                    self.positions[split.index] = reader.position()
                    reader.close()
                    del self._open[index]
                    if self._watermarks is not None:
                        self._watermarks.end_split(split.index)
                    break
                self._turn = index + 1
                if len(batch):
                    self._batch_split = split.index
                    return batch
                idle = batch
            else:
                return idle

    def loop(self) -> None:
        if self._discovery is not None:
            self._discovery.start()
        try:
            self._read()
        finally:
            if self._discovery is not None:
                self._discovery.stop()

    def _read(self) -> None:
        while not self.finished:
            if self.runtime.is_cancelled():
                return
            self.drain_control()
            if self.finished:
                return
            if self.exhausted or self.final_barrier is not None:
                self._wait_for_control(IDLE_WAIT_SECONDS)
                continue
            self._add_discovered()
            batch = self._next_batch()
            if batch is not None and not self._open:
                # No split to read yet: wait for a control message or the next look
                # for new splits rather than spin (the watermark below says idle).
                self._wait_for_control(IDLE_WAIT_SECONDS)
            if batch is None:
                self.flush_combiner()
                if self._watermarks is not None:
                    # A bounded input's end is the end of time: every window fires
                    # before the final checkpoint's barrier, and commits with it.
                    self.broadcast(Kind.WATERMARK, MAX_WATERMARK)
                self.exhausted = True
                self.runtime.source_finished()
                continue
            stamps = None
            if self._watermarks is not None and len(batch):
                stamps, _ = event_times(batch, column=self._watermarks.strategy.column,
                                        operator=f"{self.source.name} source watermarks",
                                        subtask=self.runtime.subtask)
            if len(batch):
                self._mark_records_seen()
            self.records_in += len(batch)
            if self._input_chains:
                batch = self._input_chains[input_of(self._batch_split)](batch)
            self.emit(batch)
            if self._watermarks is not None:
                self._advance_watermark(stamps)
            self.flush_if_due()

    def _wait_for_control(self, seconds: float) -> None:
        try:
            message = self.control.get(timeout=seconds)
        except queue.Empty:
            return
        self.handle_control(message)

    def _advance_watermark(self, stamps: np.ndarray | None) -> None:
        """Send the subtask's watermark downstream when the batch moved it, behind the
        batch's records and the combiner's rows (which would be late after it); or
        that the subtask is idle."""
        tracker = self._watermarks
        assert tracker is not None
        if stamps is not None:
            tracker.observe(self._batch_split, stamps)
        now = time.monotonic()
        if now - self._watermark_checked < WATERMARK_INTERVAL_SECONDS:
            return
        self._watermark_checked = now
        watermark = tracker.advance()
        if watermark is not None:
            self.flush_combiner()
            self.broadcast(Kind.WATERMARK, watermark)
            self._sent_idle = False
        elif tracker.idle and not self._sent_idle:
            self.flush_combiner()
            self.broadcast(Kind.IDLE, 0)
            self._sent_idle = True


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
        kind: BackendKind = "rocksdb" if config.state_backend == "rocksdb" else "hashmap"
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
                        self._replay.append(Batch(rows=mine))

    # -- snapshots

    def operator_snapshots(self) -> dict[str, tuple[Any, list[int]]]:
        return {self.keyed_op.uid: (self.operator.snapshot(),
                                    [self.key_groups.start, self.key_groups.stop])}

    def on_snapshot(self, checkpoint_id: int, *, alignment_seconds: float) -> None:
        config = self.runtime.config
        unaligned = (config.unaligned and config.mode == "exactly_once"
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

    def loop(self) -> None:
        for batch in self._replay:
            self.process(batch)
        self._replay = []
        handler = self.handler
        gate = self.gate
        while not self.finished:
            if self.runtime.is_cancelled():
                return
            self.drain_control()
            if self.finished:
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

