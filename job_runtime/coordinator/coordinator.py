"""The checkpoint coordinator (Flink's ``CheckpointCoordinator``), in the driver.

It triggers checkpoints periodically, collects one acknowledgement per task (a
task is one stage of one subtask) carrying that task's state handles, writes
``_metadata`` once every task acknowledged, commits the pointer to the
completed-checkpoint store, and only then tells every subtask that the
checkpoint is complete (which is when sinks commit). Declines and timeouts
abort a checkpoint; more consecutive failures than ``tolerable_failures`` fail
the job.

Its parts, one role each: a :class:`~job_runtime.coordinator.pending_checkpoint.PendingCheckpoint`
owns a checkpoint's acknowledgements and builds its ``_metadata``; the
:class:`~job_runtime.coordinator.commit_service.CommitService` writes it, commits the
pointer and deletes shared files nothing references; an
:class:`~job_runtime.coordinator.epoch.Epoch` tracks one attempt of the subtasks; the
request decider, the failure budget and the stall watch decide when to trigger and
when to give up. This module routes the messages and applies the decisions.

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

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata, OperatorDescriptor
from cjob_checkpoint.store.completed_store import (
    CheckpointIdCounter,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    FencedError,
)
from cjob_checkpoint.store.triggers import TriggerSource
from cjob_spec.names import suspended_attempt
from job_runtime.coordinator.abort_reason import AbortReason
from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.coordinator.commit_service import CommitOutcome, CommitService
from job_runtime.coordinator.endpoint import CoordinatorEndpoint
from job_runtime.coordinator.epoch import Epoch
from job_runtime.coordinator.failure_budget import FailureBudget, counts
from job_runtime.coordinator.messages import (
    Abort,
    Ack,
    Complete,
    Decline,
    Done,
    Progress,
    Ready,
    Register,
    Registered,
    Rejected,
    SinkFailure,
    SourcesFinished,
    ToCoordinator,
    Trigger,
    UserError,
)
from job_runtime.coordinator.pending_checkpoint import JobShape, PendingCheckpoint
from job_runtime.coordinator.request_decider import RequestDecider
from job_runtime.coordinator.rpc import RpcConnection
from job_runtime.coordinator.stall_watch import StallWatch
from job_runtime.coordinator.stats import CheckpointStats, CheckpointStatsTracker
from job_runtime.coordinator.streak import FailureStreak
from job_runtime.coordinator.worker import SerialWorker
from job_runtime.errors import UserCodeError
from job_runtime.faults import maybe_fail

log = logging.getLogger(__name__)


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
        self.job = JobShape(job_id=job_id, attempt=attempt, parallelism=parallelism,
                            max_parallelism=max_parallelism, stages=stages, pipeline=pipeline)
        self.attempt = attempt
        self.parallelism = parallelism
        self.storage = storage
        self.counter = counter
        self.settings = settings
        self.clock = clock
        self.on_complete = on_complete
        self.commits = CommitService(storage=storage, store=store, attempt=attempt, clock=clock,
                                     restored=initial_restore)
        self._lock = threading.RLock()
        self._io_lock = threading.Lock()
        self._epoch = Epoch.before_first(parallelism=parallelism)
        self._pending: dict[int, PendingCheckpoint] = {}
        self._restore_metadata = initial_restore
        self.restored_from = initial_restore_pointer
        # What a relaunch of the subtasks restores: the checkpoint this driver
        # started from, then each one it completes. Not ``store.latest()``: after
        # a fallback past a damaged checkpoint, the store's newest is unreadable.
        self._restorable = initial_restore_pointer
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
            self._epoch.close()

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
            epoch = self._epoch
            if message.epoch != epoch.number:
                return  # a zombie of an earlier epoch
            subtask = message.subtask
            match message:
                case Ready():
                    epoch.ready(subtask)
                case Ack():
                    self._ack(message)
                case Decline(checkpoint_id=checkpoint_id, reason=reason, subsumed=subsumed):
                    self._decline(checkpoint_id, reason, subsumed=subsumed)
                case SourcesFinished():
                    epoch.sources_finished(subtask)
                case Progress(metrics=metrics):
                    epoch.reported(subtask, metrics)
                case Done(metrics=metrics):
                    if epoch.done(subtask, metrics):
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
                if epoch < self._epoch.number:
                    conn.send(Rejected(reason=f"epoch {epoch} is over"))
                    return
                starting = epoch > self._epoch.number
                source = self._restorable if self._epoch.started else None
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
                self._epoch.registered(message.subtask, conn, channel=message.channel)
                conn.send(Registered(attempt=self.attempt, restore=self._epoch.restore))
                if self._epoch.all_registered:
                    # The rendezvous: every subtask opens its channels only now.
                    self._epoch.broadcast(self._epoch.peers())

    def _start_epoch(self, epoch: int, *, restore: CheckpointMetadata | None,
                     source: CompletedCheckpoint | None) -> None:
        if self._epoch.started:
            log.warning("subtasks restarted (stage attempt %d): aborting pending checkpoints and "
                        "restoring the latest completed checkpoint", epoch)
            if not self._epoch.all_registered:  # they wait for peers that never come
                self._epoch.broadcast(Rejected(reason=f"epoch {self._epoch.number} is over"))
            for checkpoint_id in list(self._pending):
                self._abort(checkpoint_id, reason=AbortReason.SUBTASKS_RESTARTED,
                            message="subtasks restarted")
            if source is not None:
                self.restored_from = source
        self._epoch = Epoch(number=epoch, parallelism=self.parallelism, restore=restore)
        self.epochs_started += 1
        self._decider.new_epoch()
        self._stall.new_epoch()

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
            stalled = self._stall.check(now=now,
                                        sink_waiting=self._epoch.oldest_sink_output_waiting())
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
            if pending.expired(now_mono=now, timeout=self.settings.timeout):
                self._abort(pending.checkpoint_id, reason=AbortReason.EXPIRED,
                            message=f"expired after {self.settings.timeout:g}s")

    def _running(self) -> bool:
        return (self.failure is None and not self.finished.is_set()
                and self._epoch.all_ready)

    def _due(self, now: float) -> bool | None:
        """Whether a checkpoint is due now: ``None`` if not, else whether it is the final one.

        A due trigger counts as attempted at once, so a failing one is retried after
        the interval (and at least ``trigger_retry_pause``), not on every tick.
        """
        if not self._running() or any(p.final for p in self._pending.values()):
            return None  # nothing may follow a final barrier, a suspend's included
        return self._decider.due(
            now=now, sources_finished=self._epoch.all_sources_finished,
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
            if not self._epoch.all_ready or self.failure is not None:
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
            pending = PendingCheckpoint(
                checkpoint_id=checkpoint_id, final=final, triggered_at=now,
                triggered_mono=time.monotonic(), tasks=self.job.tasks(), nonce=nonce,
                suspends=suspends)
            self.stats.started(pending.stats)
            self._pending[checkpoint_id] = pending
            self._decider.triggered(now=time.monotonic())
            epoch.broadcast(Trigger(checkpoint_id=checkpoint_id, timestamp=now, final=final))
            return checkpoint_id

    def _trigger_failed(self, exc: BaseException) -> None:
        """No id, so no checkpoint: still a failed checkpoint for the failure budget."""
        cause = f"{type(exc).__name__}: {exc}"
        self._trigger_streak.failed(f"no checkpoint id from {self.counter!r}: {cause}")
        self._decider.trigger_failed(now=time.monotonic())
        self.stats.trigger_failed()
        self._count_failure(reason=AbortReason.TRIGGER_FAILED,
                            message=f"cannot get a checkpoint id: {cause}")

    # ------------------------------------------------------------------ acks

    def _ack(self, ack: Ack) -> None:
        pending = self._pending.get(ack.checkpoint_id)
        if pending is not None and pending.acknowledge(ack):
            self._worker.submit(functools.partial(self._commit, ack.checkpoint_id))

    def _commit(self, checkpoint_id: int) -> None:
        """On the worker: write ``_metadata``, commit the pointer, then record the outcome."""
        with self._io_lock:
            with self._lock:
                pending = self._pending.get(checkpoint_id)
                if pending is None or not pending.completing:
                    return  # aborted while it waited (subsumed, or the subtasks restarted)
                metadata = pending.metadata(self.job)
                stats = pending.stats
                state_bytes = stats.size_bytes
            outcome = self.commits.commit(metadata, state_bytes=state_bytes)
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
        self._epoch.broadcast(Complete(checkpoint_id=checkpoint_id, final=pending.final))
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
        pending.stats.failure = message
        self.stats.finished(pending.stats, ok=False)
        log.warning("checkpoint %d aborted: %s", checkpoint_id, message)
        self._epoch.broadcast(Abort(checkpoint_id=checkpoint_id, reason=message))
        if not keep_data:
            self._worker.submit(functools.partial(self.commits.discard_pending, checkpoint_id))
        self._count_failure(reason=reason, message=message)

    def _count_failure(self, *, reason: AbortReason, message: str) -> None:
        if counts(reason):
            # Checkpointing is alive, only failing: the failure budget decides.
            self._stall.failed(now=time.monotonic())
        exceeded = self._budget.failed(reason=reason, message=message)
        if exceeded is not None:
            self._fail_job(exceeded)

    # ------------------------------------------------------------------ views

    @property
    def rejected_connections(self) -> int:
        """Connections dropped for failing authentication or the protocol: the
        coordinator's own, and those the subtasks' channel listeners reported."""
        with self._lock:
            reported = self._epoch.rejected_connections()
        return self._server.rejected + reported

    def snapshot_progress(self) -> dict[str, Any]:
        with self._lock:
            return {
                "epoch": self._epoch.number,
                **self._epoch.progress_view(),
                "checkpoints": self.stats.summary(),
                "pending": sorted(self._pending),
                "rejectedConnections": self.rejected_connections,
            }
