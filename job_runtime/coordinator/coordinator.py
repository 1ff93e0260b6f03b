"""The checkpoint coordinator (Flink's ``CheckpointCoordinator``), in the driver.

It triggers checkpoints periodically, collects one acknowledgement per task (a
task is one stage of one subtask) carrying that task's state handles, writes
``_metadata`` once every task acknowledged, commits the pointer to the
completed-checkpoint store, and only then tells every subtask that the
checkpoint is complete (which is when sinks commit). Declines and timeouts
abort a checkpoint; more consecutive failures than ``tolerable_failures`` fail
the job.

A suspend request (:func:`cjob_spec.names.suspend_nonce` of this attempt) is served
by a *final* checkpoint, as if every source had ended: its completion makes every
sink commit it, with the final commit's retries, and the subtasks end after that. So
the driver ends by itself, with everything up to that checkpoint visible downstream,
instead of being stopped while its sinks commit; ``suspended`` tells the driver its
end is a suspend, not the job's end.

Subtasks belong to an *epoch*, Spark's attempt number of the barrier stage.
When Spark relaunches the stage after a crash, the first registration of the
new epoch aborts everything pending, and every subtask of that epoch restores
the same checkpoint: the latest completed one at that moment.

No storage or apiserver call runs under the state lock (``_lock``): a hung call
there would stop every acknowledgement, decline and timeout. The id counter and
the manual-request read run on the timer thread with the lock released, and the
state is checked again once the answer is in. Commits and the deletion of
aborted data run on one serial worker thread. Commits and the restore of a new
epoch also hold ``_io_lock``, so a relaunch always restores the newest checkpoint
whose pointer reached the store; the lock order is ``_io_lock`` then ``_lock``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.fields import Json
from cjob_checkpoint.metadata import (
    ChannelStateHandle,
    CheckpointMetadata,
    KeyedStateHandle,
    OperatorDescriptor,
    SinkTransactions,
)
from cjob_checkpoint.store.base import (
    AmbiguousWriteError,
    CheckpointIdCounter,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    FencedError,
    StoreFullError,
)
from cjob_checkpoint.store.triggers import TriggerSource
from cjob_spec.names import suspended_attempt
from job_runtime.coordinator.abort_reason import AbortReason
from job_runtime.coordinator.endpoint import CoordinatorEndpoint
from job_runtime.coordinator.failure_budget import FailureBudget, counts
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
    SinkFailure,
    SourcesFinished,
    TaskMetrics,
    ToCoordinator,
    Trigger,
    UserError,
)
from job_runtime.coordinator.request_decider import RequestDecider
from job_runtime.coordinator.rpc import ConnectionLost, RpcConnection
from job_runtime.coordinator.settings import CheckpointSettings
from job_runtime.coordinator.stall_watch import StallWatch
from job_runtime.coordinator.stats import CheckpointStats, CheckpointStatsTracker
from job_runtime.coordinator.streak import FailureStreak
from job_runtime.coordinator.worker import SerialWorker
from job_runtime.errors import UserCodeError
from job_runtime.faults import maybe_fail
from job_runtime.sinks.health import SinkHealth
from cjob_checkpoint.shared_state import SharedStateRegistry

log = logging.getLogger(__name__)


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
    nonce: str | None = None
    """The manual request this checkpoint serves, if any."""
    suspends: bool = False
    """It serves a suspend request: the job stops once it completed and was committed."""
    completing: bool = False
    """Every task acknowledged: the commit is queued or under way and only it may end this."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommitOutcome:
    """What the storage and store calls of one commit produced (decided outside the lock)."""

    completed: CompletedCheckpoint | None = None
    reason: AbortReason | None = None
    """Why the commit failed, unless it completed or was fenced (then ``failure`` says how)."""
    failure: str = ""
    keep_data: bool = False
    fenced: FencedError | None = None
    prune_failures: int = 0


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
        initial_restore: CheckpointMetadata | None,
        initial_restore_pointer: CompletedCheckpoint | None,
        key: bytes,
        clock: Callable[[], float] = time.time,
        on_complete: Callable[[CompletedCheckpoint, CheckpointStats], None] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        triggers: TriggerSource | None = None,
        endpoint: CoordinatorEndpoint | None = None,
        pipeline: tuple[OperatorDescriptor, ...] = (),
    ) -> None:
        """``endpoint``: one opened earlier, whose registrations this coordinator answers
        (a promoted standby's, see :mod:`job_runtime.coordinator.endpoint`); without it
        the coordinator opens its own at ``host``/``port`` with ``key``."""
        self.job_id = job_id
        self.pipeline = pipeline
        """The job's keyed operators, written into every checkpoint's metadata."""
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
        self._io_lock = threading.Lock()
        self._epoch = -1
        self._connections: dict[int, RpcConnection] = {}
        self._ready: set[int] = set()
        self._sources_finished: set[int] = set()
        self._done: set[int] = set()
        self._pending: dict[int, PendingCheckpoint] = {}
        self._restore_metadata = initial_restore
        self.restored_from = initial_restore_pointer
        self.shared_files = SharedStateRegistry(storage=storage)
        """Deletes the shared files of incremental snapshots once nothing retained uses them."""
        if initial_restore is not None:
            self.shared_files.remember(initial_restore.checkpoint_id, initial_restore)
        # What a relaunch of the subtasks restores: the checkpoint this driver
        # started from, then each one it completes. Not ``store.latest()``: after
        # a fallback past a damaged checkpoint, the store's newest is unreadable.
        self._restorable = initial_restore_pointer
        self._epoch_restore: CheckpointMetadata | None = None
        self._decider = RequestDecider(settings=settings)
        self._budget = FailureBudget(tolerable=settings.tolerable_failures)
        self._stall = StallWatch(settings=settings)
        self.failure: BaseException | None = None
        self.failed_event = threading.Event()
        self.finished = threading.Event()
        self.suspended = threading.Event()
        """A suspend checkpoint completed: the subtasks commit it and end, and so does the job."""
        self.stats = CheckpointStatsTracker()
        self.latest: CompletedCheckpoint | None = store.latest()
        self.progress: dict[int, TaskMetrics] = {}
        # Wall-clock times of the current epoch's milestones (registered, ready,
        # first and last record, sources finished, done), shown in the status file.
        self.timeline: dict[str, float] = {}
        self.epochs_started = 0
        self.triggers = triggers
        # The newest manual request a completed checkpoint served: (nonce, checkpoint id).
        self._served_request: tuple[str, int] | None = None
        self._trigger_streak = FailureStreak(log=log, what="cannot start a checkpoint")
        self._poll_streak = FailureStreak(log=log,
                                          what="cannot read manual checkpoint requests")
        self._stop = threading.Event()
        self._worker = SerialWorker(name="checkpoint-io", on_error=self._fail_job)
        self._server = endpoint or CoordinatorEndpoint(host=host, port=port, key=key)
        self.port = self._server.port
        self.host = self._server.host
        self._timer = threading.Thread(target=self._run_timer, daemon=True,
                                       name="checkpoint-timer")
        self._timer.start()
        self._server.attach(self._handle)

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        self._stop.set()
        self._server.stop()
        self._worker.stop()
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
        if isinstance(message, Register):
            self._register(conn, message)  # takes the locks itself: it may read storage
            return
        with self._lock:
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
                case SinkFailure():
                    self._fail_job(message.error())

    def _register(self, conn: RpcConnection, message: Register) -> None:
        epoch = message.epoch
        with self._io_lock:  # no commit runs until the new epoch's restore is chosen
            with self._lock:
                if epoch < self._epoch:
                    conn.send(Rejected(reason=f"epoch {epoch} is over"))
                    return
                starting = epoch > self._epoch
                source = self._restorable if self._epoch >= 0 else None
            restore = self._restore_metadata
            if starting and source is not None:
                try:
                    restore = self._load(source)
                except Exception as exc:  # e.g. storage down: fail, never leave subtasks waiting
                    with self._lock:
                        conn.send(Rejected(
                            reason=f"cannot load the checkpoint to restore: {exc}"))
                        self._fail_job(exc)
                    return
            with self._lock:
                if starting:
                    self._start_epoch(epoch, restore=restore, source=source)
                self._connections[message.subtask] = conn
                if len(self._connections) == self.parallelism:
                    self.timeline.setdefault("allRegisteredAt", time.time())
                conn.send(Registered(attempt=self.attempt, restore=self._epoch_restore))

    def _start_epoch(self, epoch: int, *, restore: CheckpointMetadata | None,
                     source: CompletedCheckpoint | None) -> None:
        if self._epoch >= 0:
            log.warning("subtasks restarted (stage attempt %d): aborting pending checkpoints and "
                        "restoring the latest completed checkpoint", epoch)
            for checkpoint_id in list(self._pending):
                self._abort(checkpoint_id, reason=AbortReason.SUBTASKS_RESTARTED,
                            message="subtasks restarted")
            if source is not None:
                self.restored_from = source
        self._epoch_restore = restore
        self._epoch = epoch
        self.epochs_started += 1
        self._connections = {}
        self._ready = set()
        self._sources_finished = set()
        self._done = set()
        self._decider.new_epoch()
        self._stall.new_epoch()
        self.progress = {}
        self.timeline = {"epochStartedAt": time.time()}

    def _load(self, checkpoint: CompletedCheckpoint) -> CheckpointMetadata:
        return CheckpointMetadata.from_bytes(self.storage.read_metadata(checkpoint.metadata_path))

    # ------------------------------------------------------------------ triggering

    def _run_timer(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self._tick(time.monotonic())
            except Exception as exc:  # never let the timer die silently
                log.exception("checkpoint timer failed")
                self._fail_job(exc)

    def _tick(self, now: float) -> None:
        """Expire, then maybe poll for a manual request and trigger: calls outside the lock."""
        with self._lock:
            self._expire(now)
            if not self._running():
                return
            self._stall.running(now=now)
            stalled = self._stall.check(now=now, sink_waiting=max(
                (m.sinks.oldest_pending_seconds for m in self.progress.values()),
                default=0.0))
            if stalled is not None:
                self._fail_job(stalled)
                return
            poll = (self.triggers is not None
                    and self._decider.poll_due(now=now, pending=len(self._pending)))
        if poll and self._poll_manual_trigger():
            return
        with self._lock:
            final = self._due(now)
        if final is not None:
            self._trigger(final=final)

    def _expire(self, now: float) -> None:
        for pending in list(self._pending.values()):
            if pending.completing:
                continue  # its commit decides; the store's calls have their own timeouts
            if now - pending.triggered_mono > self.settings.timeout:
                self._abort(pending.checkpoint_id, reason=AbortReason.EXPIRED,
                            message=f"expired after {self.settings.timeout:g}s")

    def _running(self) -> bool:
        return (self.failure is None and not self.finished.is_set()
                and len(self._ready) >= self.parallelism)

    def _due(self, now: float) -> bool | None:
        """Whether a checkpoint is due now: ``None`` if not, else whether it is the final one.

        A due trigger counts as attempted at once, so a failing one is retried after
        the interval (and at least ``trigger_retry_pause``), not on every tick.
        """
        if not self._running() or any(p.final for p in self._pending.values()):
            return None  # nothing may follow a final barrier, a suspend's included
        return self._decider.due(
            now=now, sources_finished=len(self._sources_finished) == self.parallelism,
            pending=len(self._pending), final_pending=any(p.final for p in self._pending.values()))

    def _poll_manual_trigger(self) -> bool:
        """Read the manual request (outside the lock) and serve it; whether one started."""
        assert self.triggers is not None
        try:
            nonce = self.triggers.pending()
        except Exception as exc:
            self._poll_streak.failed(f"{type(exc).__name__}: {exc}")
            return False
        self._poll_streak.ended()
        if not nonce:
            return False
        with self._lock:
            served = self._served_request
            if self._pending:
                return False
        if served is not None and served[0] == nonce:
            # Served, but the answer did not reach the store: answer again, no new checkpoint.
            self._acknowledge(nonce=nonce, checkpoint_id=served[1])
            return False
        # A suspend of another attempt (one stopped before it answered) is only a checkpoint.
        suspends = suspended_attempt(nonce) == self.attempt
        checkpoint_id = self._trigger(final=suspends, nonce=nonce, suspends=suspends)
        if checkpoint_id is not None:
            log.info("checkpoint %d triggered on request %s%s", checkpoint_id, nonce,
                     " (the final one: the job stops after it)" if suspends else "")
        return checkpoint_id is not None

    def trigger(self, *, final: bool = False) -> int | None:
        """Start a checkpoint now; returns its id, or ``None`` when it could not start."""
        return self._trigger(final=final)

    def _trigger(self, *, final: bool = False, nonce: str | None = None,
                 suspends: bool = False) -> int | None:
        with self._lock:
            if len(self._ready) < self.parallelism or self.failure is not None:
                return None
            epoch = self._epoch
        try:
            checkpoint_id = self.counter.get_and_increment()  # an apiserver call: no lock
        except FencedError as exc:
            with self._lock:
                self._fail_job(exc)
            return None
        except Exception as exc:
            with self._lock:
                self._trigger_failed(exc)
            return None
        with self._lock:
            self._trigger_streak.ended()
            if self._epoch != epoch or not self._running():
                # The subtasks restarted (or the job ended) meanwhile: the id is skipped,
                # which is harmless, and the new epoch's checkpoints start afresh.
                return None
            now = self.clock()
            waiting = {(stage, s) for stage in range(self.stages)
                       for s in range(self.parallelism)}
            stats = CheckpointStats(checkpoint_id=checkpoint_id, triggered_at=now, final=final)
            self.stats.started(stats)
            self._pending[checkpoint_id] = PendingCheckpoint(
                checkpoint_id=checkpoint_id, epoch=self._epoch, final=final, triggered_at=now,
                triggered_mono=time.monotonic(), waiting=waiting, stats=stats, nonce=nonce,
                suspends=suspends)
            self._decider.triggered(now=time.monotonic())
            self._broadcast(Trigger(checkpoint_id=checkpoint_id, timestamp=now, final=final))
            return checkpoint_id

    def _trigger_failed(self, exc: BaseException) -> None:
        """No id, so no checkpoint: still a failed checkpoint for the failure budget."""
        cause = f"{type(exc).__name__}: {exc}"
        self._trigger_streak.failed(f"no checkpoint id from {self.counter!r}: {cause}")
        self._decider.trigger_failed(now=time.monotonic())
        self.stats.trigger_failed()
        self._count_failure(reason=AbortReason.TRIGGER_FAILED,
                            message=f"cannot get a checkpoint id: {cause}")

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
        if not pending.waiting and not pending.completing:
            pending.completing = True
            self._worker.submit(functools.partial(self._commit, ack.checkpoint_id))

    def _metadata(self, pending: PendingCheckpoint) -> CheckpointMetadata:
        """``_metadata`` of a checkpoint every task acknowledged: the acks' parts, merged."""
        sources: dict[int, Json] = {}
        operators: dict[str, list[KeyedStateHandle]] = {}
        channels: dict[int, list[ChannelStateHandle]] = {}
        sinks: list[SinkTransactions] = []
        for (stage, subtask), ack in sorted(pending.acks.items()):
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
            job=self.job_id, checkpoint_id=pending.checkpoint_id,
            timestamp=pending.triggered_at, final=pending.final, attempt=self.attempt,
            parallelism=self.parallelism, max_parallelism=self.max_parallelism,
            sources=sources,
            operators={uid: tuple(handles) for uid, handles in operators.items()},
            channels={stage: tuple(handles) for stage, handles in channels.items()},
            sinks=tuple(sinks), pipeline=self.pipeline)

    def _commit(self, checkpoint_id: int) -> None:
        """On the worker: write ``_metadata``, commit the pointer, then record the outcome."""
        with self._io_lock:
            with self._lock:
                pending = self._pending.get(checkpoint_id)
                if pending is None or not pending.completing:
                    return  # aborted while it waited (subsumed, or the subtasks restarted)
                metadata = self._metadata(pending)
                body = metadata.to_bytes()
                stats = pending.stats
                assert stats is not None
                size = stats.size_bytes + len(body)
            stale = self.shared_files.stale(metadata)
            if stale:
                # A subtask reused a file of a checkpoint pruned meanwhile (see
                # shared_state): this checkpoint would not restore, so it fails.
                with self._lock:
                    self._commit_failed(checkpoint_id, CommitOutcome(
                        reason=AbortReason.STALE_SHARED_FILES,
                        failure=f"it references {len(stale)} shared file(s) deleted with "
                                f"an older checkpoint, e.g. {stale[0]}"))
                return
            self.shared_files.remember(checkpoint_id, metadata)
            outcome = self._write_and_commit(checkpoint_id, body=body, size=size)
            with self._lock:
                if outcome.completed is None:
                    self._commit_failed(checkpoint_id, outcome)
                    return
                stats.prune_failures = outcome.prune_failures
            if pending.nonce is not None:
                # Answered before the subtasks hear of it: those of a suspend end the
                # stage as soon as their sinks committed, and the driver exits then.
                self._acknowledge(nonce=pending.nonce, checkpoint_id=checkpoint_id)
            with self._lock:
                self._completed(pending, outcome.completed)
        if self.on_complete is not None:
            self.on_complete(outcome.completed, stats)

    def _acknowledge(self, *, nonce: str, checkpoint_id: int) -> None:
        """Answer a manual request (an apiserver call: no lock held)."""
        assert self.triggers is not None
        try:
            self.triggers.acknowledge(nonce=nonce, checkpoint_id=checkpoint_id)
        except Exception as exc:  # the next poll sees the request open and answers again
            log.warning("cannot acknowledge checkpoint request %s: %s", nonce, exc)

    def _write_and_commit(self, checkpoint_id: int, *, body: bytes, size: int) -> CommitOutcome:
        """The storage and store calls of a commit; runs without the state lock.

        Only errors that prove the pointer was *not* committed let the abort delete
        the checkpoint's data. Any other error may come after the commit (a store
        whose pruning raised): then the data is what the committed pointer names,
        and deleting it would leave the job's newest restorable checkpoint empty.
        """
        try:
            maybe_fail("driver.before-metadata", checkpoint_id)
            path = self.storage.write_metadata(checkpoint_id, body)
            maybe_fail("driver.before-pointer", checkpoint_id)
            completed = CompletedCheckpoint(
                checkpoint_id=checkpoint_id, metadata_path=path, timestamp=self.clock(),
                size_bytes=size, attempt=self.attempt)
        except Exception as exc:
            log.warning("checkpoint %d could not be committed: %s", checkpoint_id, exc)
            return CommitOutcome(reason=AbortReason.COMMIT_FAILED,
                                 failure=f"commit failed: {exc}")
        failures_before = self.store.prune_failures
        try:
            self.store.add_checkpoint_and_subsume_oldest(completed,
                                                         discard=self.shared_files.discard)
        except FencedError as exc:
            return CommitOutcome(fenced=exc)
        except AmbiguousWriteError as exc:
            # The pointer may have landed: its data must stay, and the sinks must not
            # commit (a restore might still pick the previous checkpoint). The next
            # completed checkpoint settles it.
            log.warning("checkpoint %d: outcome of the store write unknown: %s",
                        checkpoint_id, exc)
            return CommitOutcome(reason=AbortReason.STORE_WRITE_AMBIGUOUS,
                                 failure=f"store write ambiguous: {exc}", keep_data=True)
        except StoreFullError as exc:
            log.warning("checkpoint %d could not be committed: %s", checkpoint_id, exc)
            return CommitOutcome(reason=AbortReason.COMMIT_FAILED,
                                 failure=f"commit failed: {exc}")
        except Exception as exc:
            log.warning("checkpoint %d: the store failed, possibly after committing the pointer; "
                        "its data stays: %s", checkpoint_id, exc)
            return CommitOutcome(reason=AbortReason.STORE_FAILED,
                                 failure=f"store failed: {exc}", keep_data=True)
        self.delete_unreferenced_shared(checkpoint_id)
        return CommitOutcome(completed=completed,
                             prune_failures=self.store.prune_failures - failures_before)

    def delete_unreferenced_shared(self, checkpoint_id: int) -> None:
        """After a prune: shared files no retained checkpoint references go (best effort)."""
        try:
            retained = self.store.all(skip_corrupt=True)
            deleted = self.shared_files.delete_unreferenced(retained, checkpoint_id=checkpoint_id)
        except Exception as exc:  # a leak, never a failed checkpoint
            log.warning("checkpoint %d: unreferenced shared files not deleted: %s",
                        checkpoint_id, exc)
            return
        if deleted:
            log.info("checkpoint %d: deleted %d shared file(s) no retained checkpoint uses",
                     checkpoint_id, len(deleted))

    def _commit_failed(self, checkpoint_id: int, outcome: CommitOutcome) -> None:
        if outcome.fenced is not None:
            self._pending.pop(checkpoint_id, None)
            self._fail_job(outcome.fenced)
            return
        assert outcome.reason is not None
        self._abort(checkpoint_id, reason=outcome.reason, message=outcome.failure,
                    keep_data=outcome.keep_data)

    def _completed(self, pending: PendingCheckpoint, completed: CompletedCheckpoint) -> None:
        """Record a committed checkpoint and notify the subtasks."""
        checkpoint_id = pending.checkpoint_id
        stats = pending.stats
        assert stats is not None
        self._pending.pop(checkpoint_id, None)
        stats.duration_ms = (time.monotonic() - pending.triggered_mono) * 1000.0
        stats.size_bytes = completed.size_bytes
        self.stats.finished(stats, ok=True)
        self._budget.succeeded()
        self._decider.completed(now=time.monotonic())
        self._stall.completed(now=time.monotonic(), duration=stats.duration_ms / 1000.0)
        self.latest = completed
        self._restorable = completed
        maybe_fail("driver.before-notify", checkpoint_id)
        for older in [p for p in self._pending if p < checkpoint_id]:
            self._abort(older, reason=AbortReason.SUBSUMED,
                        message=f"subsumed by checkpoint {checkpoint_id}")
        if pending.final:
            self._decider.final_completed()
        if pending.nonce is not None:
            self._served_request = (pending.nonce, checkpoint_id)
        if pending.suspends:
            self.suspended.set()
        self._broadcast(Complete(checkpoint_id=checkpoint_id, final=pending.final))
        log.info("checkpoint %d completed (%d bytes, %.0f ms)", checkpoint_id,
                 completed.size_bytes, stats.duration_ms)

    # ------------------------------------------------------------------ failures

    def _decline(self, checkpoint_id: int, reason: str, *, subsumed: bool = False) -> None:
        pending = self._pending.get(checkpoint_id)
        if pending is not None and not pending.completing:
            self._abort(checkpoint_id,
                        reason=AbortReason.DECLINED_SUBSUMED if subsumed else AbortReason.DECLINED,
                        message=f"declined: {reason}")

    def _abort(self, checkpoint_id: int, *, reason: AbortReason, message: str,
               keep_data: bool = False) -> None:
        """End a pending checkpoint; ``message`` is what the logs, the status file and the
        subtasks' ``Abort`` say, and the failure budget decides whether ``reason`` counts."""
        pending = self._pending.pop(checkpoint_id, None)
        if pending is None:
            return
        if pending.stats is not None:
            pending.stats.failure = message
            self.stats.finished(pending.stats, ok=False)
        log.warning("checkpoint %d aborted: %s", checkpoint_id, message)
        self._broadcast(Abort(checkpoint_id=checkpoint_id, reason=message))
        if not keep_data:
            self._worker.submit(functools.partial(self._discard_pending, checkpoint_id))
        self._count_failure(reason=reason, message=message)

    def _count_failure(self, *, reason: AbortReason, message: str) -> None:
        if counts(reason):
            # Checkpointing is alive, only failing: the failure budget decides.
            self._stall.failed(now=time.monotonic())
        exceeded = self._budget.failed(reason=reason, message=message)
        if exceeded is not None:
            self._fail_job(exceeded)

    def _discard_pending(self, checkpoint_id: int) -> None:
        """On the worker: delete an aborted checkpoint's data (storage calls, no lock)."""
        try:
            self.storage.discard_pending(checkpoint_id)
        except Exception as exc:
            log.warning("could not delete the data of aborted checkpoint %d: %s",
                        checkpoint_id, exc)

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
            watermarks = [m.watermark for m in metrics if m.watermark is not None]
            return {
                "epoch": self._epoch,
                "sourceLag": [lag for m in metrics for lag in m.source_backlog],
                # The job's event time is as far as its slowest subtask's.
                "watermark": min(watermarks) if watermarks else None,
                "lateRecords": sum(m.late_records for m in metrics),
                "sinks": sum((m.sinks for m in metrics), SinkHealth()),
                "recordsIn": records_in,
                "recordsOut": records_out,
                "checkpoints": self.stats.summary(),
                "pending": sorted(self._pending),
                "timeline": timeline,
                "rejectedConnections": self.rejected_connections,
            }
