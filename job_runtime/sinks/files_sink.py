"""``files``: JSON lines or Parquet files, committed exactly once.

Records of one checkpoint interval go to a staging file under ``<path>/_pending/``
(hidden: names starting with ``_`` or ``.`` are not part of the output). The
checkpoint barrier closes the interval (no I/O, so the barrier passes at once);
the uploader thread then writes the staging file, which becomes a pending
transaction of that checkpoint, and only then acknowledges the checkpoint, so no
checkpoint completes before its staged data is durable. When the checkpoint
completes, the staging file is renamed to its final name ``part-<job tag>-<checkpoint>-<subtask>.<ext>`` (the tag is a hash of the
job's name and uid, see ``output_tag``). A commit is idempotent:
when the staging file is gone and the final file exists, it already happened.
Staging names carry the attempt, so a zombie of an older attempt never writes
into a file a newer attempt commits.

Between two barriers the records wait in a local spool file that stays in memory
up to ``memory_bytes`` and moves to the local temp directory beyond it (Parquet:
row groups of about that size), so a long interval or a checkpoint that cannot
complete for a while costs disk, not the executor's memory.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import re
import threading
from typing import Any

from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.file_system import FileSystem
from job_runtime.errors import PipelineDefinitionError
from job_runtime.faults import maybe_fail
from job_runtime.records import Batch
from job_runtime.sinks.commit import (
    CommitRetry,
    LostTransactionError,
    SinkCommitError,
    commit_with_retry,
)
from job_runtime.sinks.interval import Interval
from job_runtime.sinks.sink_contract import Sink, SinkContext, SinkSnapshot, SinkWriter

log = logging.getLogger(__name__)

__all__ = ["CommitRetry", "FilesSink", "FilesSinkWriter", "LostTransactionError",
           "SinkCommitError", "Transaction", "files", "output_tag"]

FORMATS = {"jsonl": "jsonl", "parquet": "parquet"}
PENDING_DIR = "_pending"
TAG_LENGTH = 12
DEFAULT_MEMORY_BYTES = 8 << 20
"""Bytes of one interval's records a writer keeps in memory before it spills to disk."""


def output_tag(job_id: str) -> str:
    """The short identity of a job in its file names.

    ``job_id`` is ``<name>-<uid>``, so a job deleted and created again under the same
    name gets another tag and cannot withdraw or overwrite its predecessor's files.
    """
    return hashlib.sha256(job_id.encode()).hexdigest()[:TAG_LENGTH]


def _part_pattern(tag: str) -> re.Pattern[str]:
    """Committed part files of the job with ``tag`` (group 1: the checkpoint id).

    Without a tag (a sink used outside a job) only untagged names match, so an
    untagged writer never touches a job's files either.
    """
    if tag:
        return re.compile(rf"^part-{re.escape(tag)}-(\d{{10}})-\d{{5}}\.[a-z]+$")
    return re.compile(r"^part-(\d{10})-\d{5}\.[a-z]+$")


@dataclasses.dataclass(frozen=True)
class Transaction:
    checkpoint_id: int
    staging: str
    final: str
    records: int


class _FilesPreCommit(SinkSnapshot):
    def __init__(self, *, writer: FilesSinkWriter, checkpoint_id: int) -> None:
        self._writer = writer
        self._checkpoint_id = checkpoint_id

    def complete(self) -> Any:
        return self._writer.stage_through(self._checkpoint_id)


class FilesSinkWriter(SinkWriter):
    def __init__(self, *, path: str, fmt: str, context: SinkContext,
                 commit_retry: CommitRetry, memory_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        self._path = path.rstrip("/")
        self._fmt = fmt
        self._context = context
        self._commit_retry = commit_retry
        self._memory_bytes = memory_bytes
        self._fs: FileSystem = get_filesystem(self._path, s3=context.s3)
        # ``_lock`` guards the lists below (the task thread writes and commits, the
        # uploader thread stages); ``_stage_lock`` keeps stagings in checkpoint order.
        self._lock = threading.Lock()
        self._stage_lock = threading.Lock()
        self._pending: list[Transaction] = []
        self._closed: list[Interval] = []
        """Intervals closed by a barrier and not yet staged, oldest first."""
        self._open = self._new_interval()

    def _new_interval(self) -> Interval:
        return Interval(fmt=self._fmt, memory_bytes=self._memory_bytes)

    def _prefix(self) -> str:
        tag = output_tag(self._context.job_id) if self._context.job_id else ""
        return f"part-{tag}-" if tag else "part-"

    def _staging_uri(self, checkpoint_id: int) -> str:
        ctx = self._context
        return (f"{self._path}/{PENDING_DIR}/{self._prefix()}{checkpoint_id:010d}-"
                f"{ctx.subtask:05d}-{ctx.attempt_tag}.{self._fmt}.inprogress")

    def _final_uri(self, checkpoint_id: int) -> str:
        return (f"{self._path}/{self._prefix()}{checkpoint_id:010d}-"
                f"{self._context.subtask:05d}.{self._fmt}")

    def write(self, batch: Batch) -> None:
        if not len(batch):
            return
        self._open.write(batch)

    def begin_snapshot(self, checkpoint_id: int) -> SinkSnapshot:
        """The barrier's part: close the open interval and open the next, no I/O."""
        closed, self._open = self._open, self._new_interval()
        closed.checkpoint_id = checkpoint_id
        with self._lock:
            self._closed.append(closed)
        return _FilesPreCommit(writer=self, checkpoint_id=checkpoint_id)

    def snapshot(self, checkpoint_id: int) -> Any:
        return self.begin_snapshot(checkpoint_id).complete()

    def stage_through(self, checkpoint_id: int) -> Any:
        """Stage every closed interval up to ``checkpoint_id``; return the pending list.

        An interval whose own checkpoint never got here (its snapshot was dropped
        by a newer barrier, or its staging failed and declined it) is staged now,
        under its own checkpoint id: a later checkpoint carries it as pending, as
        the two-phase commit protocol requires, so its records are never lost.
        """
        with self._stage_lock:
            while True:
                with self._lock:
                    due = next((i for i in self._closed if i.checkpoint_id <= checkpoint_id),
                               None)
                if due is None:
                    break
                transaction = None
                if due.records:
                    staging = self._staging_uri(due.checkpoint_id)
                    due.stage(self._fs, staging)
                    transaction = Transaction(checkpoint_id=due.checkpoint_id, staging=staging,
                                              final=self._final_uri(due.checkpoint_id),
                                              records=due.records)
                with self._lock:
                    if transaction is not None:
                        self._pending.append(transaction)
                    self._closed.remove(due)
                due.close()
            with self._lock:
                return [dataclasses.astuple(t) for t in self._pending
                        if t.checkpoint_id <= checkpoint_id]

    def close(self) -> None:
        """Drop the open and unstaged intervals: no checkpoint names their records."""
        with self._lock:
            closed, self._closed = self._closed, []
        for interval in [*closed, self._open]:
            interval.close()
        self._open = self._new_interval()

    def _commit(self, transaction: Transaction) -> None:
        if self._fs.exists(transaction.staging):
            self._fs.rename(transaction.staging, transaction.final)
        elif not self._fs.exists(transaction.final):
            raise LostTransactionError(checkpoint_id=transaction.checkpoint_id,
                                       staging=transaction.staging, final=transaction.final)

    def notify_complete(self, checkpoint_id: int, *, final: bool = False) -> None:
        with self._lock:
            due = [t for t in self._pending if t.checkpoint_id <= checkpoint_id]
            for transaction in due:
                if final:
                    # No later checkpoint retries this one: succeed or fail the attempt.
                    commit_with_retry(functools.partial(self._commit, transaction),
                                      retry=self._commit_retry, checkpoint_id=checkpoint_id,
                                      target=transaction.final)
                else:
                    try:
                        self._commit(transaction)
                    except Exception as exc:  # retried on the next completed checkpoint
                        log.warning("commit of %s failed, will retry: %s", transaction.final,
                                    exc)
                        return
                maybe_fail("subtask.during-commit", checkpoint_id)
                self._pending.remove(transaction)

    def restore(self, states: list[Any]) -> None:
        """Commit the restored pending transactions; one whose data is gone fails the restore."""
        for state in states:
            for fields in state or []:
                transaction = Transaction(*fields)
                commit_with_retry(functools.partial(self._commit, transaction),
                                  retry=self._commit_retry,
                                  checkpoint_id=transaction.checkpoint_id,
                                  target=transaction.final)


class FilesSink(Sink):
    name = "files"
    exactly_once = True

    def __init__(self, *, path: str, fmt: str, commit_retry: CommitRetry | None = None,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        if fmt not in FORMATS:
            raise PipelineDefinitionError(
                problem=f"files sink format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        if not isinstance(memory_bytes, int) or memory_bytes < 1:
            raise PipelineDefinitionError(
                problem=f"files sink memory_bytes must be a positive integer, got "
                        f"{memory_bytes!r}")
        self.path = path
        self.fmt = fmt
        self.commit_retry = commit_retry or CommitRetry()
        self.memory_bytes = memory_bytes

    def open(self, *, context: SinkContext) -> SinkWriter:
        return FilesSinkWriter(path=self.path, fmt=self.fmt, context=context,
                               commit_retry=self.commit_retry, memory_bytes=self.memory_bytes)

    def prepare_restore(self, *, checkpoint_id: int, job_id: str = "", s3: Any = None) -> None:
        """Withdraw this job's part files of checkpoints newer than the restored one."""
        base = self.path.rstrip("/")
        fs = get_filesystem(base, s3=s3)
        pattern = _part_pattern(output_tag(job_id) if job_id else "")
        for uri in fs.list(base):
            name = uri[len(base) + 1:]
            match = pattern.match(name)
            if match and int(match.group(1)) > checkpoint_id:
                log.warning("withdrawing %s: committed by a checkpoint newer than the restored "
                            "checkpoint %d, whose state produces these records again",
                            uri, checkpoint_id)
                fs.delete(uri)

    def finish_job(self, *, job_id: str = "", s3: Any = None) -> None:
        """The job finished and everything is committed: its staging leftovers are
        garbage. Another job's staged data under the same path is not."""
        pending = self.path.rstrip("/") + "/" + PENDING_DIR
        fs = get_filesystem(pending, s3=s3)
        tag = output_tag(job_id) if job_id else ""
        if not tag:
            fs.delete_prefix(pending)
            return
        own = f"part-{tag}-"
        for uri in fs.list(pending):
            if uri[len(pending) + 1:].startswith(own):
                fs.delete(uri)


def files(path: str, format: str = "jsonl", *,
          commit_retry: CommitRetry | None = None,
          memory_bytes: int = DEFAULT_MEMORY_BYTES) -> FilesSink:
    """Exactly-once files under ``path`` (local, ``file://`` or ``s3://``).

    ``commit_retry`` bounds the retries of commits that cannot wait for a later
    checkpoint (the final one, and those of a restore). ``memory_bytes`` is how
    much of one interval's output a subtask keeps in memory before it spills to
    its local temp directory.
    """
    if not isinstance(path, str) or not path:
        raise PipelineDefinitionError(problem="files sink needs a path")
    return FilesSink(path=path, fmt=format, commit_retry=commit_retry,
                     memory_bytes=memory_bytes)
