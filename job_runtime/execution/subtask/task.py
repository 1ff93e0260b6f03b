"""What every task of a subtask is: a thread that takes control messages from the
coordinator between batches (so a checkpoint never interrupts a record function
halfway), sends what it emits to the next stage or its sinks, snapshots its part of a
checkpoint at the barrier and commits its sinks when the checkpoint completes.

A task writes to the sinks of its stage: the main sink in the last stage, and the
sinks of the side outputs of its keyed operator (branches). It pre-commits all of
them at each barrier and commits all of them when the checkpoint completes, so each
sink of the job is exactly-once in the same checkpoints. The two kinds of task are
:mod:`~job_runtime.execution.subtask.source_task` and
:mod:`~job_runtime.execution.subtask.keyed_task`.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from job_runtime.coordinator.messages import Complete, ToSubtask
from job_runtime.errors import UserCodeError
from job_runtime.execution.stages import StagePlan
from job_runtime.execution.subtask.recent import RecentIds
from job_runtime.execution.subtask.task_context import TaskContext
from job_runtime.execution.subtask.uploader import UploadJob
from job_runtime.faults import maybe_fail
from job_runtime.network.channels import OutputChannel
from job_runtime.network.framing import Kind
from job_runtime.operators.accumulators import partial_key_groups
from job_runtime.operators.chain import RecordChain
from job_runtime.operators.combiner import Combiner
from job_runtime.operators.window_combiner import WindowCombiner
from job_runtime.pipeline import KeyedKind
from job_runtime.records import (
    Batch,
    split_by_target,
)
from job_runtime.sinks.sink_contract import MAIN_SINK, SinkWriter

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
                partial, self.runtime.config.max_parallelism))

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

    def goes_on(self) -> bool:
        """Between two batches: handle the control messages that arrived; whether the
        task goes on (not cancelled, not finished by one of them)."""
        if self.runtime.is_cancelled():
            return False
        self.drain_control()
        return not self.finished

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
