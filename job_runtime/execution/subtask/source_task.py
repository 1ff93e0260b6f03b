"""The source task: stage 0 of a subtask. It reads the subtask's splits, runs the
record functions up to the first ``key_by``, sends each record to the keyed task that
owns its key group, keeps the watermark of its splits, and starts each checkpoint
with a barrier between two batches when the coordinator triggers it.
"""

from __future__ import annotations

import logging
import queue
import time
from typing import Any

import numpy as np

from cjob_checkpoint.metadata import CheckpointMetadata
from job_runtime.coordinator.messages import Abort, Trigger
from job_runtime.execution.subtask.split_discovery import SplitDiscovery
from job_runtime.execution.subtask.task import WATERMARK_INTERVAL_SECONDS, Control, Task
from job_runtime.execution.subtask.watermark_tracking import SplitWatermarks
from job_runtime.network.framing import Kind
from job_runtime.operators.chain import RecordChain
from job_runtime.records import Batch
from job_runtime.sources.source_contract import (
    RestoredSplit,
    Source,
    SourceBacklog,
    SourceContext,
    Split,
    SplitReader,
)
from job_runtime.sources.union import input_of
from job_runtime.watermarks import MAX_WATERMARK, WatermarkStrategy, event_times

log = logging.getLogger(__name__)

IDLE_WAIT_SECONDS = 0.1
"""How long a source task with nothing to read (its input ended, or it holds no split
of an unbounded source yet) waits for a control message before it looks again."""


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
            if not self.goes_on():
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
