"""One checkpoint interval's records in a local spool file: the part the files sink and
the write-ahead sink share.

An interval outlives its barrier: the barrier closes it and opens the next one at
once, and the uploader thread stages the closed one later, off the barrier path. Both
sinks keep the interval's records in a spooled file (memory up to ``memory_bytes``,
then the local temp directory) and stage it by copying it to a staging file;
:class:`Spool` is that, and each sink adds how its records are encoded:
:class:`Interval` as JSON lines or Parquet (the files sink), and the write-ahead
sink's Arrow frames (:class:`~job_runtime.sinks.write_ahead.ArrowSpool`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from cjob_checkpoint.storage.file_system import FileSystem
from job_runtime.faults import maybe_fail
from job_runtime.records import Batch
from job_runtime.sinks.parquet_encoding import dictionary_columns

STAGE_CHUNK_BYTES = 1 << 20


class Spool:
    """The records of one checkpoint interval, waiting in a local spooled file that
    starts with ``header``; created at the first write."""

    def __init__(self, *, memory_bytes: int, prefix: str, header: bytes = b"") -> None:
        self.memory_bytes = memory_bytes
        self.checkpoint_id = 0
        """The checkpoint whose barrier closed the interval (0 while it is open)."""
        self.records = 0
        self._prefix = prefix
        self._header = header
        self._spool: IO[bytes] | None = None

    def spool(self) -> IO[bytes]:
        if self._spool is None:
            self._spool = tempfile.SpooledTemporaryFile(  # noqa: SIM115 - closed in close()
                max_size=self.memory_bytes, prefix=self._prefix)
            self._spool.write(self._header)
        return self._spool

    def finish_writing(self) -> None:
        """Write out what the encoding still holds; called before each stage."""

    def stage(self, fs: FileSystem, uri: str) -> None:
        """Copy the spool to the staging file ``uri``, a megabyte at a time; may be
        repeated.

        The staging file is durable when this returns (the file system's writer
        closed it); a failure leaves the spool intact for another try.
        """
        self.finish_writing()
        spool = self.spool()
        spool.seek(0)
        with fs.open_write(uri) as out:
            shutil.copyfileobj(spool, out, STAGE_CHUNK_BYTES)
            # Killed here, the staging file is incomplete and no checkpoint names it.
            maybe_fail("subtask.during-pre-commit", self.checkpoint_id)
        spool.seek(0, 2)

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None


class Interval(Spool):
    """The files sink's interval: JSON lines, or Parquet row groups.

    For Parquet, the batches of the row group being collected are held until they
    reach ``memory_bytes``, and a Parquet writer writes the row groups into the spool.
    """

    def __init__(self, *, fmt: str, memory_bytes: int) -> None:
        super().__init__(memory_bytes=memory_bytes, prefix="cjob-sink-")
        self.fmt = fmt
        self._arrow: list[pa.RecordBatch] = []
        self._arrow_bytes = 0
        self._parquet: pq.ParquetWriter | None = None

    def write(self, batch: Batch) -> None:
        if self.fmt == "jsonl":
            lines = [json.dumps(row, separators=(",", ":"), default=str).encode("utf-8")
                     for row in batch.rows]
            lines.append(b"")
            self.spool().write(b"\n".join(lines))
        else:
            arrow = batch.arrow
            self._arrow.append(arrow)
            self._arrow_bytes += arrow.nbytes
            if self._arrow_bytes >= self.memory_bytes:
                self._flush_row_group()
        self.records += len(batch)

    def _flush_row_group(self) -> None:
        """Parquet: write the collected batches to the spool as one row group."""
        if not self._arrow:
            return
        table = pa.Table.from_batches(self._arrow)
        if self._parquet is None:
            self._parquet = pq.ParquetWriter(self.spool(), table.schema,
                                             use_dictionary=dictionary_columns(table))
        self._parquet.write_table(table)
        self._arrow = []
        self._arrow_bytes = 0

    def finish_writing(self) -> None:
        if self.fmt == "parquet":
            self._flush_row_group()
            if self._parquet is not None:
                self._parquet.close()
                self._parquet = None

    def close(self) -> None:
        if self._parquet is not None:
            self._parquet.close()
            self._parquet = None
        super().close()
        self._arrow = []
        self._arrow_bytes = 0
