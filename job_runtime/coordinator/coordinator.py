"""The checkpoint coordinator (Flink's ``CheckpointCoordinator``), in the driver.

It triggers checkpoints periodically, collects one acknowledgement per task (a
task is one stage of one subtask) carrying that task's state handles, writes
``_metadata`` once every task acknowledged, commits the pointer to the
completed-checkpoint store, and only then tells every subtask that the
checkpoint is complete (which is when sinks commit). Declines and timeouts
abort a checkpoint; more consecutive failures than ``tolerable_failures`` fail
the job.

Subtasks belong to an *epoch*, Spark's attempt number of the barrier stage.
When Spark relaunches the stage after a crash, the first registration of the
new epoch aborts everything pending, and every subtask of that epoch restores
the same checkpoint: the latest completed one at that moment.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from job_runtime.coordinator.messages import (
    Abort,
    Ack,
    Complete,
    Decline,
    Done,
    Message,
    Progress,
    Ready,
    Register,
    Registered,
    Rejected,
    SourcesFinished,
    TaskMetrics,
    ToCoordinator,
    Trigger,
    UserError,
)
from job_runtime.coordinator.rpc import ConnectionLost, RpcConnection, RpcServer
from job_runtime.coordinator.stats import CheckpointStats, CheckpointStatsTracker
from job_runtime.errors import CheckpointFailureBudgetExceeded, UserCodeError
from job_runtime.faults import maybe_fail
from job_runtime.storage.checkpoint_storage import CheckpointStorage
from job_runtime.store.base import (
    AmbiguousWriteError,
    CheckpointIdCounter,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    FencedError,
    StoreError,
    StoreFullError,
)
from job_runtime.store.triggers import TriggerSource

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointSettings:
    interval: float = 10.0
    min_pause: float = 0.0
    timeout: float = 600.0
    max_concurrent: int = 1
    tolerable_failures: int = 0


@dataclasses.dataclass(kw_only=True)
class PendingCheckpoint:
    checkpoint_id: int
    epoch: int
    final: bool
    triggered_at: float
    triggered_mono: float
    waiting: set[tuple[int, int]]
    acks: dict[tuple[int, int], Ack] = dataclasses.field(default_factory=dict)
    stats: CheckpointStats | None = None


class JobFailed(Exception):
    """Raised in the driver's main thread when the coordinator decided the job must end."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class CheckpointCoordinator:
    def __init__(
        self,
        *,
        job_id: str,
        attempt: int,
        parallelism: int,
        max_parallelism: int,
        stages: int,
        storage: CheckpointStorage,
        store: CompletedCheckpointStore,
        counter: CheckpointIdCounter,
        settings: CheckpointSettings,
        initial_restore: dict[str, Any] | None,
        initial_restore_pointer: CompletedCheckpoint | None,
        key: bytes,
        clock: Callable[[], float] = time.time,
        on_complete: Callable[[CompletedCheckpoint, CheckpointStats], None] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        triggers: TriggerSource | None = None,
    ) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.stages = stages
        self.storage = storage
        self.store = store
        self.counter = counter
        self.settings = settings
        self.clock = clock
        self.on_complete = on_complete
        self._lock = threading.RLock()
        self._epoch = -1
        self._connections: dict[int, RpcConnection] = {}
        self._ready: set[int] = set()
        self._sources_finished: set[int] = set()
        self._done: set[int] = set()
        self._pending: dict[int, PendingCheckpoint] = {}
        self._restore_metadata = initial_restore
        self.restored_from = initial_restore_pointer
        # What a relaunch of the subtasks restores: the checkpoint this driver
        # started from, then each one it completes. Not ``store.latest()``: after
        # a fallback past a damaged checkpoint, the store's newest is unreadable.
        self._restorable = initial_restore_pointer
        self._epoch_restore: dict[str, Any] | None = None
        self._last_completed_mono = 0.0
        self._last_trigger_mono = 0.0
        self._consecutive_failures = 0
        self.failure: BaseException | None = None
        self.failed_event = threading.Event()
        self.finished = threading.Event()
        self.stats = CheckpointStatsTracker()
        self.latest: CompletedCheckpoint | None = store.latest()
        self.progress: dict[int, TaskMetrics] = {}
        # Wall-clock times of the current epoch's milestones (registered, ready,
        # first and last record, sources finished, done), shown in the status file.
        self.timeline: dict[str, float] = {}
        self.epochs_started = 0
        self.triggers = triggers
        self._final_completed = False
        self._manual: dict[int, str] = {}
        self._last_trigger_poll = 0.0
        self._stop = threading.Event()
        self._server = RpcServer(host=host, port=port, key=key, handler=self._handle,
                                 on_disconnect=self._disconnected)
        self.port = self._server.port
        self.host = self._server.host
        self._timer = threading.Thread(target=self._run_timer, daemon=True,
                                       name="checkpoint-timer")
        self._timer.start()

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        self._stop.set()
        self._server.stop()
        with self._lock:
            for conn in self._connections.values():
                conn.close()

    def _fail_job(self, cause: BaseException) -> None:
        if self.failure is None:
            self.failure = cause
            log.error("job failed: %s", cause)
        self.failed_event.set()

    # ------------------------------------------------------------------ messages

    def _handle(self, conn: RpcConnection, message: ToCoordinator) -> None:
        with self._lock:
            if isinstance(message, Register):
                self._register(conn, message)
                return
            if message.epoch != self._epoch:
                return  # a zombie of an earlier epoch
            subtask = message.subtask
            match message:
                case Ready():
                    self._ready.add(subtask)
                    self.timeline.setdefault("firstReadyAt", time.time())
                    if len(self._ready) == self.parallelism:
                        self.timeline.setdefault("allReadyAt", time.time())
                case Ack():
                    self._ack(message)
                case Decline(checkpoint_id=checkpoint_id, reason=reason, subsumed=subsumed):
                    self._decline(checkpoint_id, reason, subsumed=subsumed)
                case SourcesFinished():
                    self._sources_finished.add(subtask)
                    if len(self._sources_finished) == self.parallelism:
                        self.timeline.setdefault("sourcesFinishedAt", time.time())
                case Progress(metrics=metrics):
                    self.progress[subtask] = metrics
                case Done(metrics=metrics):
                    self.progress[subtask] = metrics
                    self._done.add(subtask)
                    if len(self._done) == self.parallelism:
                        self.timeline.setdefault("doneAt", time.time())
                        self.finished.set()
                case UserError(operator=operator, details=details):
                    self._fail_job(UserCodeError(operator=operator, subtask=subtask,
                                                 details=details))

    def _register(self, conn: RpcConnection, message: Register) -> None:
        epoch = message.epoch
        if epoch < self._epoch:
            conn.send(Rejected(reason=f"epoch {epoch} is over"))
            return
        if epoch > self._epoch:
            try:
                self._start_epoch(epoch)
            except Exception as exc:  # e.g. storage down: fail, never leave subtasks waiting
                conn.send(Rejected(reason=f"cannot load the checkpoint to restore: {exc}"))
                self._fail_job(exc)
                return
        self._connections[message.subtask] = conn
        if len(self._connections) == self.parallelism:
            self.timeline.setdefault("allRegisteredAt", time.time())
        conn.send(Registered(restore=self._epoch_restore))

    def _start_epoch(self, epoch: int) -> None:
        if self._epoch >= 0:
            log.warning("subtasks restarted (stage attempt %d): aborting pending checkpoints and "
                        "restoring the latest completed checkpoint", epoch)
            for checkpoint_id in list(self._pending):
                self._abort(checkpoint_id, reason="subtasks restarted", count=False)
            latest = self._restorable
            if latest is not None:
                self._epoch_restore = self._load(latest)
                self.restored_from = latest
            else:
                self._epoch_restore = self._restore_metadata
        else:
            self._epoch_restore = self._restore_metadata
        self._epoch = epoch
        self.epochs_started += 1
        self._connections = {}
        self._ready = set()
        self._sources_finished = set()
        self._done = set()
        self._final_completed = False
        self.progress = {}
        self.timeline = {"epochStartedAt": time.time()}

    def _load(self, checkpoint: CompletedCheckpoint) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.storage.read_metadata(checkpoint.metadata_path))
        return data

    def _disconnected(self, conn: RpcConnection) -> None:
        return None

    # ------------------------------------------------------------------ triggering

    def _run_timer(self) -> None:
        while not self._stop.wait(0.02):
            try:
                with self._lock:
                    self._tick(time.monotonic())
            except Exception as exc:  # never let the timer die silently
                log.exception("checkpoint timer failed")
                self._fail_job(exc)

    def _tick(self, now: float) -> None:
        for pending in list(self._pending.values()):
            if now - pending.triggered_mono > self.settings.timeout:
                self._abort(pending.checkpoint_id,
                            reason=f"expired after {self.settings.timeout:g}s")
        if self.failure is not None or self.finished.is_set():
            return
        if len(self._ready) < self.parallelism:
            return
        if self.triggers is not None and now - self._last_trigger_poll >= 1.0:
            self._last_trigger_poll = now
            self._poll_manual_trigger()
        final = len(self._sources_finished) == self.parallelism
        if final:
            if self._final_completed or any(p.final for p in self._pending.values()):
                return
        else:
            if self.settings.interval <= 0:
                return
            if len(self._pending) >= self.settings.max_concurrent:
                return
            if now - self._last_trigger_mono < self.settings.interval:
                return
            if now - self._last_completed_mono < self.settings.min_pause:
                return
        self.trigger(final=final)

    def _poll_manual_trigger(self) -> None:
        assert self.triggers is not None
        try:
            nonce = self.triggers.pending()
        except Exception as exc:
            log.debug("cannot read manual checkpoint requests: %s", exc)
            return
        if not nonce or nonce in self._manual.values() or self._pending:
            return
        checkpoint_id = self.trigger()
        if checkpoint_id is not None:
            log.info("checkpoint %d triggered on request %s", checkpoint_id, nonce)
            self._manual[checkpoint_id] = nonce

    def trigger(self, *, final: bool = False) -> int | None:
        """Start a checkpoint now; returns its id, or ``None`` when it could not start."""
        with self._lock:
            if len(self._ready) < self.parallelism:
                return None
            try:
                checkpoint_id = self.counter.get_and_increment()
            except FencedError as exc:
                self._fail_job(exc)
                return None
            except StoreError as exc:
                log.warning("cannot get a checkpoint id: %s", exc)
                return None
            now = self.clock()
            waiting = {(stage, s) for stage in range(self.stages)
                       for s in range(self.parallelism)}
            stats = CheckpointStats(checkpoint_id=checkpoint_id, triggered_at=now, final=final)
            self.stats.started(stats)
            self._pending[checkpoint_id] = PendingCheckpoint(
                checkpoint_id=checkpoint_id, epoch=self._epoch, final=final, triggered_at=now,
                triggered_mono=time.monotonic(), waiting=waiting, stats=stats)
            self._last_trigger_mono = time.monotonic()
            self._broadcast(Trigger(checkpoint_id=checkpoint_id, timestamp=now, final=final))
            return checkpoint_id

    def _broadcast(self, message: Message) -> None:
        for conn in list(self._connections.values()):
            try:
                conn.send(message)
            except ConnectionLost:
                pass

    # ------------------------------------------------------------------ acks

    def _ack(self, ack: Ack) -> None:
        pending = self._pending.get(ack.checkpoint_id)
        if pending is None:
            return
        task = (ack.stage, ack.subtask)
        pending.waiting.discard(task)
        pending.acks[task] = ack
        stats = pending.stats
        assert stats is not None
        stats.acks += 1
        stats.size_bytes += ack.stats.bytes
        stats.alignment_ms_max = max(stats.alignment_ms_max, ack.stats.alignment_ms)
        stats.sync_ms_max = max(stats.sync_ms_max, ack.stats.sync_ms)
        stats.async_ms_max = max(stats.async_ms_max, ack.stats.async_ms)
        if not pending.waiting:
            self._complete(pending)

    def _metadata(self, pending: PendingCheckpoint) -> dict[str, Any]:
        sources: dict[str, Any] = {}
        operators: dict[str, list[dict[str, Any]]] = {}
        channels: dict[str, list[dict[str, Any]]] = {}
        sinks: dict[str, Any] = {}
        for (stage, subtask), ack in sorted(pending.acks.items()):
            state = ack.state
            for split, position in state.sources.items():
                sources[str(split)] = position
            for uid, operator in state.operators.items():
                operators.setdefault(uid, []).append({"subtask": subtask, **operator.to_json()})
            if state.channels is not None:
                channels.setdefault(str(stage), []).append({"subtask": subtask,
                                                            **state.channels.to_dict()})
            if state.sink is not None:
                sinks[str(subtask)] = state.sink
        return {
            "version": 1,
            "job": self.job_id,
            "checkpointId": pending.checkpoint_id,
            "timestamp": pending.triggered_at,
            "final": pending.final,
            "attempt": self.attempt,
            "parallelism": self.parallelism,
            "maxParallelism": self.max_parallelism,
            "sources": sources,
            "operators": operators,
            "channels": channels,
            "sinks": sinks,
        }

    def _complete(self, pending: PendingCheckpoint) -> None:
        checkpoint_id = pending.checkpoint_id
        stats = pending.stats
        assert stats is not None
        try:
            body = json.dumps(self._metadata(pending), separators=(",", ":")).encode()
            maybe_fail("driver.before-metadata", checkpoint_id)
            path = self.storage.write_metadata(checkpoint_id, body)
            maybe_fail("driver.before-pointer", checkpoint_id)
            completed = CompletedCheckpoint(
                checkpoint_id=checkpoint_id, metadata_path=path, timestamp=self.clock(),
                size_bytes=stats.size_bytes + len(body), attempt=self.attempt)
        except Exception as exc:
            log.warning("checkpoint %d could not be committed: %s", checkpoint_id, exc)
            self._abort(checkpoint_id, reason=f"commit failed: {exc}")
            return
        if not self._commit_pointer(pending, completed):
            return
        self._completed(pending, completed)

    def _commit_pointer(self, pending: PendingCheckpoint, completed: CompletedCheckpoint) -> bool:
        """Hand the pointer to the store; ``False`` when the checkpoint did not complete.

        Only errors that prove the pointer was *not* committed let the abort delete
        the checkpoint's data. Any other error may come after the commit (a store
        whose pruning raised): then the data is what the committed pointer names,
        and deleting it would leave the job's newest restorable checkpoint empty.
        """
        checkpoint_id = pending.checkpoint_id
        stats = pending.stats
        assert stats is not None
        failures_before = self.store.prune_failures
        try:
            self.store.add_checkpoint_and_subsume_oldest(completed, discard=self.storage.discard)
        except FencedError as exc:
            del self._pending[checkpoint_id]
            self._fail_job(exc)
            return False
        except AmbiguousWriteError as exc:
            # The pointer may have landed: its data must stay, and the sinks must not
            # commit (a restore might still pick the previous checkpoint). The next
            # completed checkpoint settles it.
            log.warning("checkpoint %d: outcome of the store write unknown: %s",
                        checkpoint_id, exc)
            self._abort(checkpoint_id, reason=f"store write ambiguous: {exc}", keep_data=True)
            return False
        except StoreFullError as exc:
            log.warning("checkpoint %d could not be committed: %s", checkpoint_id, exc)
            self._abort(checkpoint_id, reason=f"commit failed: {exc}")
            return False
        except Exception as exc:
            log.warning("checkpoint %d: the store failed, possibly after committing the pointer; "
                        "its data stays: %s", checkpoint_id, exc)
            self._abort(checkpoint_id, reason=f"store failed: {exc}", keep_data=True)
            return False
        stats.prune_failures = self.store.prune_failures - failures_before
        return True

    def _completed(self, pending: PendingCheckpoint, completed: CompletedCheckpoint) -> None:
        checkpoint_id = pending.checkpoint_id
        stats = pending.stats
        assert stats is not None
        del self._pending[checkpoint_id]
        stats.duration_ms = (time.monotonic() - pending.triggered_mono) * 1000.0
        stats.size_bytes = completed.size_bytes
        self.stats.finished(stats, ok=True)
        self._consecutive_failures = 0
        self._last_completed_mono = time.monotonic()
        self.latest = completed
        self._restorable = completed
        maybe_fail("driver.before-notify", checkpoint_id)
        for older in [p for p in self._pending if p < checkpoint_id]:
            self._abort(older, reason=f"subsumed by checkpoint {checkpoint_id}", count=False)
        if pending.final:
            self._final_completed = True
        self._broadcast(Complete(checkpoint_id=checkpoint_id, final=pending.final))
        log.info("checkpoint %d completed (%d bytes, %.0f ms)", checkpoint_id,
                 completed.size_bytes, stats.duration_ms)
        nonce = self._manual.pop(checkpoint_id, None)
        if nonce is not None and self.triggers is not None:
            try:
                self.triggers.acknowledge(nonce=nonce, checkpoint_id=checkpoint_id)
            except Exception as exc:
                log.warning("cannot acknowledge checkpoint request %s: %s", nonce, exc)
        if self.on_complete is not None:
            self.on_complete(completed, stats)

    # ------------------------------------------------------------------ failures

    def _decline(self, checkpoint_id: int, reason: str, *, subsumed: bool = False) -> None:
        if checkpoint_id in self._pending:
            self._abort(checkpoint_id, reason=f"declined: {reason}", count=not subsumed)

    def _abort(self, checkpoint_id: int, *, reason: str, count: bool = True,
               keep_data: bool = False) -> None:
        pending = self._pending.pop(checkpoint_id, None)
        if pending is None:
            return
        if pending.stats is not None:
            pending.stats.failure = reason
            self.stats.finished(pending.stats, ok=False)
        log.warning("checkpoint %d aborted: %s", checkpoint_id, reason)
        self._broadcast(Abort(checkpoint_id=checkpoint_id, reason=reason))
        if not keep_data:
            try:
                self.storage.discard_pending(checkpoint_id)
            except Exception as exc:
                log.warning("could not delete the data of aborted checkpoint %d: %s",
                            checkpoint_id, exc)
        if count:
            self._consecutive_failures += 1
            if self._consecutive_failures > self.settings.tolerable_failures:
                self._fail_job(CheckpointFailureBudgetExceeded(
                    failures=self._consecutive_failures,
                    tolerable=self.settings.tolerable_failures, last_reason=reason))

    # ------------------------------------------------------------------ views

    @property
    def rejected_connections(self) -> int:
        """Connections dropped for failing authentication or the protocol: the
        coordinator's own, and those the subtasks' channel listeners reported."""
        with self._lock:
            reported = sum(m.rejected_connections for m in self.progress.values())
        return self._server.rejected + reported

    def snapshot_progress(self) -> dict[str, Any]:
        with self._lock:
            metrics = list(self.progress.values())
            records_in = sum(m.records_in for m in metrics)
            records_out = sum(m.records_out for m in metrics)
            timeline = dict(self.timeline)
            firsts = [m.first_record_at for m in metrics if m.first_record_at is not None]
            lasts = [m.last_record_at for m in metrics if m.last_record_at is not None]
            if firsts:
                timeline["firstRecordAt"] = min(firsts)
            if lasts:
                timeline["lastRecordAt"] = max(lasts)
            restores = [m.restore_seconds for m in metrics if m.restore_seconds is not None]
            if restores:
                timeline["restoreSecondsMax"] = max(restores)
            return {
                "epoch": self._epoch,
                "recordsIn": records_in,
                "recordsOut": records_out,
                "checkpoints": self.stats.summary(),
                "pending": sorted(self._pending),
                "timeline": timeline,
                "rejectedConnections": self.rejected_connections,
            }
