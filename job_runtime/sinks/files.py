"""``files``: JSON lines or Parquet files, committed exactly once.

Records of one checkpoint interval go to a staging file under ``<path>/_pending/``
(hidden: names starting with ``_`` or ``.`` are not part of the output). At the
checkpoint barrier the staging file is closed and becomes a pending transaction
of that checkpoint. When the checkpoint completes, the staging file is renamed
to its final name ``part-<checkpoint>-<subtask>.<ext>``. A commit is idempotent:
when the staging file is gone and the final file exists, it already happened.
Staging names carry the attempt, so a zombie of an older attempt never writes
into a file a newer attempt commits.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import re
import threading
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from job_runtime.errors import PipelineDefinitionError
from job_runtime.faults import maybe_fail
from job_runtime.records import Batch
from job_runtime.sinks.base import Sink, SinkContext, SinkWriter
from job_runtime.storage.filesystem import FileSystem, get_filesystem

log = logging.getLogger(__name__)

FORMATS = {"jsonl": "jsonl", "parquet": "parquet"}
PENDING_DIR = "_pending"
_PART = re.compile(r"^part-(\d{10})-\d{5}\.[a-z]+$")


@dataclasses.dataclass(frozen=True)
class Transaction:
    checkpoint_id: int
    staging: str
    final: str
    records: int


class FilesSinkWriter(SinkWriter):
    def __init__(self, *, path: str, fmt: str, context: SinkContext) -> None:
        self._path = path.rstrip("/")
        self._fmt = fmt
        self._context = context
        self._fs: FileSystem = get_filesystem(self._path, s3=context.s3)
        self._lock = threading.Lock()
        self._pending: list[Transaction] = []
        self._buffer = io.BytesIO()
        self._arrow: list[pa.RecordBatch] = []
        self._records = 0
        self._transaction_seq = 0

    def _staging_uri(self, checkpoint_id: int) -> str:
        ctx = self._context
        return (f"{self._path}/{PENDING_DIR}/part-{checkpoint_id:010d}-{ctx.subtask:05d}-"
                f"{ctx.attempt_tag}.{self._fmt}.inprogress")

    def _final_uri(self, checkpoint_id: int) -> str:
        return f"{self._path}/part-{checkpoint_id:010d}-{self._context.subtask:05d}.{self._fmt}"

    def write(self, batch: Batch) -> None:
        if not len(batch):
            return
        if self._fmt == "jsonl":
            out = self._buffer
            for row in batch.rows:
                out.write(json.dumps(row, separators=(",", ":"), default=str).encode("utf-8"))
                out.write(b"\n")
        else:
            self._arrow.append(batch.arrow)
        self._records += len(batch)

    def _payload(self) -> bytes:
        if self._fmt == "jsonl":
            return self._buffer.getvalue()
        table = pa.Table.from_batches(self._arrow)
        sink = io.BytesIO()
        pq.write_table(table, sink)
        return sink.getvalue()

    def snapshot(self, checkpoint_id: int) -> Any:
        if self._records:
            staging = self._staging_uri(checkpoint_id)
            self._fs.write_bytes(staging, self._payload())
            transaction = Transaction(checkpoint_id=checkpoint_id, staging=staging,
                                      final=self._final_uri(checkpoint_id),
                                      records=self._records)
            with self._lock:
                self._pending.append(transaction)
        self._buffer = io.BytesIO()
        self._arrow = []
        self._records = 0
        with self._lock:
            return [dataclasses.astuple(t) for t in self._pending]

    def _commit(self, transaction: Transaction) -> None:
        if self._fs.exists(transaction.staging):
            self._fs.rename(transaction.staging, transaction.final)
        elif not self._fs.exists(transaction.final):
            raise FileNotFoundError(
                f"neither staging {transaction.staging} nor final {transaction.final} exists")

    def notify_complete(self, checkpoint_id: int) -> None:
        with self._lock:
            due = [t for t in self._pending if t.checkpoint_id <= checkpoint_id]
            for transaction in due:
                try:
                    self._commit(transaction)
                except Exception as exc:  # retried on the next completed checkpoint
                    log.warning("commit of %s failed, will retry: %s", transaction.final, exc)
                    return
                maybe_fail("subtask.during-commit", checkpoint_id)
                self._pending.remove(transaction)

    def restore(self, states: list[Any]) -> None:
        for state in states:
            for fields in state or []:
                transaction = Transaction(*fields)
                try:
                    self._commit(transaction)
                except FileNotFoundError:
                    log.warning("pending transaction %s of the restored checkpoint was lost",
                                transaction.final)


class FilesSink(Sink):
    name = "files"
    exactly_once = True

    def __init__(self, *, path: str, fmt: str) -> None:
        if fmt not in FORMATS:
            raise PipelineDefinitionError(
                problem=f"files sink format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        self.path = path
        self.fmt = fmt

    def open(self, *, context: SinkContext) -> SinkWriter:
        return FilesSinkWriter(path=self.path, fmt=self.fmt, context=context)

    def prepare_restore(self, *, checkpoint_id: int, s3: Any = None) -> None:
        """Withdraw the part files of checkpoints newer than the restored one."""
        base = self.path.rstrip("/")
        fs = get_filesystem(base, s3=s3)
        for uri in fs.list(base):
            name = uri[len(base) + 1:]
            match = _PART.match(name)
            if match and int(match.group(1)) > checkpoint_id:
                log.warning("withdrawing %s: committed by a checkpoint newer than the restored "
                            "checkpoint %d, whose state produces these records again",
                            uri, checkpoint_id)
                fs.delete(uri)

    def finish_job(self, *, s3: Any = None) -> None:
        """The job finished and everything is committed: staging leftovers are garbage."""
        pending = self.path.rstrip("/") + "/" + PENDING_DIR
        get_filesystem(pending, s3=s3).delete_prefix(pending)


def files(path: str, format: str = "jsonl") -> FilesSink:
    """Exactly-once files under ``path`` (local, ``file://`` or ``s3://``)."""
    if not isinstance(path, str) or not path:
        raise PipelineDefinitionError(problem="files sink needs a path")
    return FilesSink(path=path, fmt=format)
