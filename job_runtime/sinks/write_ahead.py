"""``write_ahead``: hand each checkpoint interval to the user's code once its checkpoint
completed, and record that it arrived with a :class:`CheckpointCommitter`.

The files sink can make output visible atomically (a rename). Most systems a job writes
to cannot: a database, a REST service, a queue. For them the sink keeps the records of
a checkpoint interval durably next to the job's checkpoints (the *write-ahead log*)
and sends them only after the checkpoint that closed the interval completed, so the
outside world never sees records a restore would produce again. A committer then
records that interval ``(subtask, checkpoint)`` arrived; a restart asks the committer
before sending again, so exactly the intervals not yet committed are re-sent, however
old they are.

The send and the commit are two steps. When they can share one transaction (a database
that takes the records and the committer's row together, the Kafka sink's transaction
that carries its marker), the output is exactly once. Otherwise a crash between the
two re-sends that one interval: at least once for it, or exactly once if ``send`` is
idempotent.

The life of one interval on one subtask:

1. ``write`` appends batches to a local spool (memory, then the temp directory);
2. the barrier of checkpoint ``n`` closes it (no I/O on the barrier path);
3. the uploader thread copies it to ``<staging>/<subtask>/<n>-<attempt>.arrows`` and
   only then acknowledges ``n``: the checkpoint's sink state lists it as pending;
4. when ``n`` completes: unless the committer says it is committed, read it back,
   ``send(records, checkpoint_id=n, subtask=...)``, ``committer.commit(...)``; then
   delete the staged file;
5. a restore goes through step 4 for every pending interval the checkpoint lists,
   oldest first, before any new output.

Pending intervals keep the subtask that wrote them: after a rescale, old subtask ``j``'s
intervals are re-sent by new subtask ``j % parallelism`` under ``j``'s name, so the
committer's records stay meaningful.

They keep the job that wrote them too. A job restored from another job's checkpoint (a
job created again, a snapshot restored into a new job) finds that job's pending
intervals: one is done when *that* job's committer recorded it (it may have sent it
and deleted its file long ago), or when this job's did (this job sent it before a
restart); otherwise this job sends it and records it as its own. Another job's staged
files are never deleted: that job may still be restored from the same checkpoint.
"""

from __future__ import annotations

import copy
import functools
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.file_system import FileSystem
from job_runtime.errors import PipelineDefinitionError, UserCodeError
from job_runtime.faults import maybe_fail
from job_runtime.records import Batch
from job_runtime.sinks.arrival import (
    ArrivalRecord,
    CheckpointCommitter,
    SendFunction,
    TransactionalSender,
)
from job_runtime.sinks.commit import (
    CommitRetry,
    LostTransactionError,
    SinkFencedError,
    commit_with_retry,
)
from job_runtime.sinks.failures import RejectedRecordError, SinkFailedError, SinkFailureKind
from job_runtime.sinks.health import SinkHealth
from job_runtime.sinks.sink_contract import Sink, SinkContext, SinkSnapshot, SinkWriter
from job_runtime.sinks.write_ahead_log import ArrowSpool, PendingInterval, read_staged

log = logging.getLogger(__name__)

__all__ = ["ArrivalRecord", "CheckpointCommitter", "PendingInterval", "SendFunction",
           "TransactionalSender", "TransactionalSink", "WriteAheadSink", "WriteAheadWriter",
           "staging_path", "write_ahead"]

DEFAULT_MEMORY_BYTES = 8 << 20


class _StageThrough(SinkSnapshot):
    def __init__(self, *, writer: WriteAheadWriter, checkpoint_id: int) -> None:
        self._writer = writer
        self._checkpoint_id = checkpoint_id

    def complete(self) -> Any:
        return self._writer.stage_through(self._checkpoint_id)


CommitterOf = Callable[[str], ArrivalRecord]
"""A committer that answers for the intervals of the job it is given (another job's,
after a foreign restore), ready to be asked."""


def copy_of(committer: ArrivalRecord) -> CommitterOf:
    """Committers for other jobs as shallow copies of ``committer`` as the job handed it
    over (call before it is opened), each opened with the other job's id."""
    unopened = copy.copy(committer)

    def committer_of(job_id: str) -> ArrivalRecord:
        other = copy.copy(unopened)
        other.open(job_id=job_id)
        return other

    return committer_of


class WriteAheadWriter(SinkWriter):
    """``committer``: a :class:`CheckpointCommitter`, with the ``send`` it records, or
    a :class:`TransactionalSender`, which sends and records in one step (no ``send``)."""

    def __init__(self, *, committer: CheckpointCommitter | TransactionalSender,
                 context: SinkContext, staging: str, commit_retry: CommitRetry,
                 memory_bytes: int, name: str, send: SendFunction | None = None,
                 committer_of: CommitterOf | None = None) -> None:
        if (send is None) != isinstance(committer, TransactionalSender):
            raise TypeError("a write-ahead writer takes a send function with a "
                            "CheckpointCommitter, and none with a TransactionalSender")
        self._send = send
        self._committer_of = committer_of or copy_of(committer)
        self._origins: dict[str, ArrivalRecord] = {}
        """Committers of the jobs whose restored intervals this writer sends."""
        self._committer = committer
        self._context = context
        self._staging = staging.rstrip("/")
        self._commit_retry = commit_retry
        self._memory_bytes = memory_bytes
        self._name = name
        self._fs: FileSystem = get_filesystem(self._staging, s3=context.s3)
        self._committer.open(job_id=context.job_id)
        # ``_lock`` guards the lists (the task thread writes and sends, the uploader
        # thread stages); ``_stage_lock`` keeps stagings in checkpoint order and
        # ``_send_lock`` sends in checkpoint order whichever thread completes.
        self._lock = threading.Lock()
        self._stage_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._closed: list[ArrowSpool] = []
        self._pending: list[PendingInterval] = []
        self._open = self._new_spool()
        self._bytes: dict[str, int] = {}
        self._completed_at: dict[str, float] = {}
        """When the checkpoint of each pending interval (by staged URI) completed: the
        age of undelivered output."""
        self._last_send_failure = ""
        """The last failed send's error, while output waits (for a stall's report)."""
        self._dead_letters = 0
        self._clock: Callable[[], float] = time.monotonic
        self._key = secrets.token_hex(16)
        """This writer's secret for the intervals it stages (a new one per attempt)."""

    def _new_spool(self) -> ArrowSpool:
        return ArrowSpool(memory_bytes=self._memory_bytes)

    def _staging_uri(self, checkpoint_id: int) -> str:
        ctx = self._context
        return (f"{self._staging}/{ctx.subtask:05d}/"
                f"{checkpoint_id:010d}-{ctx.attempt_tag}.arrows")

    def write(self, batch: Batch) -> None:
        if not len(batch):
            return
        try:
            self._open.write(batch)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise UserCodeError(
                operator=self._name, subtask=self._context.subtask,
                details=f"the records of one batch must give each column one type: {exc}",
            ) from exc

    def begin_snapshot(self, checkpoint_id: int) -> SinkSnapshot:
        closed, self._open = self._open, self._new_spool()
        closed.checkpoint_id = checkpoint_id
        with self._lock:
            self._closed.append(closed)
        return _StageThrough(writer=self, checkpoint_id=checkpoint_id)

    def snapshot(self, checkpoint_id: int) -> Any:
        return self.begin_snapshot(checkpoint_id).complete()

    def stage_through(self, checkpoint_id: int) -> list[dict[str, Any]]:
        """Stage every closed interval up to ``checkpoint_id``; the pending list as JSON.

        An interval whose own checkpoint was declined is staged under its own id and
        travels with the next checkpoint, as in the files sink: nothing is dropped.
        """
        with self._stage_lock:
            while True:
                with self._lock:
                    due = next((s for s in self._closed if s.checkpoint_id <= checkpoint_id),
                               None)
                if due is None:
                    break
                interval = None
                if due.records:
                    uri = self._staging_uri(due.checkpoint_id)
                    due.stage(self._fs, uri)
                    interval = PendingInterval(checkpoint_id=due.checkpoint_id,
                                               subtask=self._context.subtask, uri=uri,
                                               records=due.records,
                                               job=self._context.job_id, key=self._key)
                with self._lock:
                    if interval is not None:
                        self._pending.append(interval)
                        self._bytes[interval.uri] = due.bytes
                    self._closed.remove(due)
                due.close()
            with self._lock:
                return [p.to_json() for p in self._pending if p.checkpoint_id <= checkpoint_id]

    def _origin(self, job: str) -> ArrivalRecord:
        """The committer of ``job``, another job whose interval this writer inherited."""
        committer = self._origins.get(job)
        if committer is None:
            committer = self._origins[job] = self._committer_of(job)
        return committer

    def _foreign(self, job: str) -> bool:
        return bool(job) and job != self._context.job_id

    def _arrived(self, interval: PendingInterval) -> bool:
        """Whether the interval reached the outside: recorded by this job's committer,
        or, written by another job, by that job's."""
        if self._committer.is_committed(subtask=interval.subtask,
                                        checkpoint_id=interval.checkpoint_id):
            return True
        return self._foreign(interval.job) and self._origin(interval.job).is_committed(
            subtask=interval.subtask, checkpoint_id=interval.checkpoint_id)

    def _learn(self, interval: PendingInterval) -> None:
        """Tell the committers that may be asked about ``interval`` of it."""
        committers: list[ArrivalRecord] = [self._committer]
        if self._foreign(interval.job):
            committers.append(self._origin(interval.job))
        for committer in committers:
            committer.learn_interval(subtask=interval.subtask,
                                     checkpoint_id=interval.checkpoint_id, key=interval.key)

    def _deliver(self, interval: PendingInterval) -> None:
        """Send one interval unless it arrived before, then record it; idempotent."""
        committer = self._committer
        self._learn(interval)
        if not self._arrived(interval):
            if not self._fs.exists(interval.uri):
                raise LostTransactionError(checkpoint_id=interval.checkpoint_id,
                                           staging=interval.uri,
                                           final="the write-ahead sink's committer")
            with self._fs.open_read(interval.uri) as stream:
                records = read_staged(stream)
            try:
                if isinstance(committer, TransactionalSender):
                    routed = committer.send(records, checkpoint_id=interval.checkpoint_id,
                                            subtask=interval.subtask)
                else:
                    assert self._send is not None
                    routed = self._send(records, checkpoint_id=interval.checkpoint_id,
                                        subtask=interval.subtask)
            except RejectedRecordError as exc:
                raise SinkFailedError(
                    kind=SinkFailureKind.REJECTED, sink=self._name, subtask=interval.subtask,
                    checkpoint_id=interval.checkpoint_id,
                    problem=f"record {exc.position} of the interval's {len(records)}: "
                            f"{exc.problem}") from None
            self._dead_letters += routed or 0
            # Killed here, the interval went out and a committer does not know: the
            # restore sends it again (a transactional sender's record went with it).
            maybe_fail("subtask.write-ahead-after-send", interval.checkpoint_id)
            if isinstance(committer, CheckpointCommitter):
                committer.commit(subtask=interval.subtask,
                                 checkpoint_id=interval.checkpoint_id)
        if self._foreign(interval.job):
            return  # that job's file: it may still be restored from the same checkpoint
        try:
            self._fs.delete(interval.uri)
        except Exception as exc:  # garbage only: the committer has the interval
            log.warning("could not delete the sent interval %s: %s", interval.uri, exc)

    def notify_complete(self, checkpoint_id: int, *, final: bool = False) -> None:
        with self._send_lock:
            now = self._clock()
            with self._lock:
                due = [p for p in self._pending if p.checkpoint_id <= checkpoint_id]
                for interval in due:
                    self._completed_at.setdefault(interval.uri, now)
            for interval in due:
                if final:
                    commit_with_retry(functools.partial(self._deliver, interval),
                                      retry=self._commit_retry,
                                      checkpoint_id=interval.checkpoint_id,
                                      target=f"the {self._name} sink's send")
                else:
                    try:
                        self._deliver(interval)
                    except (LostTransactionError, SinkFencedError, SinkFailedError):
                        raise
                    except Exception as exc:  # in order: later intervals wait for it
                        self._send_failed(interval, exc)
                        return
                with self._lock:
                    self._pending.remove(interval)
                    self._last_send_failure = ""
                    self._completed_at.pop(interval.uri, None)
                    self._bytes.pop(interval.uri, None)

    def _send_failed(self, interval: PendingInterval, exc: Exception) -> None:
        """A send that may work later failed: wait for the next checkpoint, unless the
        interval has waited longer than the stall bound.

        The wait counts from its checkpoint's completion, not from the first failure:
        a client that blocks for its own timeout before it fails (a broker that does
        not answer) has spent that time too, and the bound is how long output may wait.
        """
        now = self._clock()
        failure = f"{type(exc).__name__}: {exc}"
        with self._lock:
            waiting = now - self._completed_at.get(interval.uri, now)
            self._last_send_failure = failure
        bound = self._context.stall_timeout
        if bound and waiting > bound:
            raise self._stalled(interval, waiting=waiting, bound=bound, last=failure) from exc
        log.warning("the %s sink's send of the interval of checkpoint %d failed (its output "
                    "has waited %.0fs), will retry at the next checkpoint: %s", self._name,
                    interval.checkpoint_id, waiting, exc)

    def _waiting(self, now: float) -> list[tuple[float, PendingInterval]]:
        """Each pending interval whose checkpoint completed, with how long it has waited
        (call with ``_lock`` held)."""
        return [(now - self._completed_at[p.uri], p) for p in self._pending
                if p.uri in self._completed_at]

    def overdue(self) -> SinkFailedError | None:
        now = self._clock()
        bound = self._context.stall_timeout
        with self._lock:
            waiting = self._waiting(now)
            last = self._last_send_failure
        if not bound or not waiting:
            return None
        age, interval = max(waiting, key=lambda entry: entry[0])
        if age <= bound:
            return None
        return self._stalled(interval, waiting=age, bound=bound, last=last)

    def _stalled(self, interval: PendingInterval, *, waiting: float, bound: float,
                 last: str) -> SinkFailedError:
        return SinkFailedError(
            kind=SinkFailureKind.STALLED, sink=self._name, subtask=interval.subtask,
            checkpoint_id=interval.checkpoint_id,
            problem=f"its output has waited {waiting:.0f}s since its checkpoint completed, "
                    f"longer than the stall bound of {bound:g}s; "
                    + (f"last send failure: {last}" if last else "its send has not returned"))

    def health(self) -> SinkHealth:
        now = self._clock()
        with self._lock:
            pending = list(self._pending)
            ages = [age for age, _ in self._waiting(now)]
        return SinkHealth(pending_intervals=len(pending),
                          pending_records=sum(p.records for p in pending),
                          pending_bytes=sum(self._bytes.get(p.uri, 0) for p in pending),
                          oldest_pending_seconds=max(ages, default=0.0),
                          dead_letters=self._dead_letters)

    def restore(self, states: list[Any]) -> None:
        """Send the restored checkpoint's pending intervals not yet committed, oldest
        first, before any new output."""
        written_by = self._context.restored_job or self._context.job_id
        intervals = sorted((PendingInterval.from_json(entry, written_by=written_by)
                            for state in states for entry in state or []),
                           key=lambda p: (p.checkpoint_id, p.subtask))
        with self._send_lock:
            if self._foreign(written_by):
                # Made even without pending intervals: a committer that owns resources
                # per job (the Kafka sink's transactional ids) ends what the other job
                # left open before this one writes.
                def origin_ready() -> None:
                    self._origin(written_by)

                commit_with_retry(origin_ready, retry=self._commit_retry,
                                  checkpoint_id=max((i.checkpoint_id for i in intervals),
                                                    default=0),
                                  target=f"the write-ahead sink's committer of job "
                                         f"{written_by}")
            # Every restored interval is known before the first question: a marker of a
            # later one may be all that says an earlier one was sent.
            for interval in intervals:
                commit_with_retry(functools.partial(self._learn, interval),
                                  retry=self._commit_retry,
                                  checkpoint_id=interval.checkpoint_id,
                                  target=f"the {self._name} sink's committer")
            for interval in intervals:
                commit_with_retry(functools.partial(self._deliver, interval),
                                  retry=self._commit_retry,
                                  checkpoint_id=interval.checkpoint_id,
                                  target=f"the {self._name} sink's send")

    def close(self) -> None:
        with self._lock:
            closed, self._closed = self._closed, []
        for spool in [*closed, self._open]:
            spool.close()
        self._open = self._new_spool()
        self._committer.close()
        origins, self._origins = self._origins, {}
        for committer in origins.values():
            committer.close()


class WriteAheadSink(Sink):
    name = "write_ahead"
    exactly_once = True

    def __init__(self, *, send: SendFunction, committer: CheckpointCommitter,
                 staging: str | None, commit_retry: CommitRetry, memory_bytes: int) -> None:
        self.send = send
        self.committer = committer
        self.staging = staging
        self.commit_retry = commit_retry
        self.memory_bytes = memory_bytes

    def open(self, *, context: SinkContext) -> SinkWriter:
        return WriteAheadWriter(send=self.send, committer=self.committer, context=context,
                                staging=staging_path(self.staging, context=context,
                                                     sink=self.name),
                                commit_retry=self.commit_retry,
                                memory_bytes=self.memory_bytes, name=self.name)


class TransactionalSink(Sink):
    """A write-ahead sink whose sends record their own arrival (a
    :class:`TransactionalSender`: a table commit that names its interval); subclasses
    name themselves (``name``) and give the sender."""

    exactly_once = True

    def __init__(self, *, sender: TransactionalSender) -> None:
        self.sender = sender
        self.commit_retry = CommitRetry()

    def open(self, *, context: SinkContext) -> SinkWriter:
        return WriteAheadWriter(committer=self.sender, context=context,
                                staging=staging_path(None, context=context, sink=self.name),
                                commit_retry=self.commit_retry,
                                memory_bytes=DEFAULT_MEMORY_BYTES, name=self.name)


def staging_path(staging: str | None, *, context: SinkContext, sink: str) -> str:
    """Where a write-ahead writer keeps its intervals: ``<staging>/write-ahead``, by
    default in the job's directory of the checkpoint storage."""
    root = staging or context.staging_root
    if not root:
        raise PipelineDefinitionError(
            problem=f"the {sink} sink needs a staging path outside a job "
                    "(inside one it keeps intervals next to the checkpoints)")
    return f"{root.rstrip('/')}/write-ahead"


def write_ahead(send: Callable[..., None], committer: CheckpointCommitter, *,
                staging: str | None = None, commit_retry: CommitRetry | None = None,
                memory_bytes: int = DEFAULT_MEMORY_BYTES) -> WriteAheadSink:
    """Send each checkpoint interval with ``send(records, checkpoint_id=, subtask=)``
    once its checkpoint completed, exactly the intervals ``committer`` has not recorded.

    ``records`` is a ``pyarrow.Table`` (``records.to_pylist()`` gives dicts). Intervals
    wait under ``staging`` (default: the job's checkpoint directory, which every
    attempt of the job can read). ``commit_retry`` bounds the retries of sends that
    cannot wait for a later checkpoint (the final one, and those of a restore).
    """
    if not callable(send):
        raise PipelineDefinitionError(problem="write_ahead needs a send function, got "
                                              f"{type(send).__name__}")
    if not isinstance(committer, CheckpointCommitter):
        raise PipelineDefinitionError(
            problem="write_ahead needs a CheckpointCommitter (is_committed and commit), "
                    f"got {type(committer).__name__}")
    if not isinstance(memory_bytes, int) or isinstance(memory_bytes, bool) or memory_bytes < 1:
        raise PipelineDefinitionError(
            problem=f"write_ahead memory_bytes must be a positive integer, got "
                    f"{memory_bytes!r}")
    if staging is not None and (not isinstance(staging, str) or not staging):
        raise PipelineDefinitionError(problem="write_ahead staging must be a non-empty path")
    return WriteAheadSink(send=send, committer=committer, staging=staging,
                          commit_retry=commit_retry or CommitRetry(), memory_bytes=memory_bytes)
