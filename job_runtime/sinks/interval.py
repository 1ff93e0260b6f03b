"""One checkpoint interval of the files sink: its records in a local spool file.

Split from :mod:`job_runtime.sinks.files` because an interval now outlives its
barrier: the barrier closes it and opens the next one at once, and the uploader
thread stages the closed one later (see ``FilesSinkWriter.begin_snapshot``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from cjob_checkpoint.storage.base import FileSystem
from job_runtime.faults import maybe_fail
from job_runtime.records import Batch
from job_runtime.sinks.parquet_encoding import dictionary_columns


class Interval:
    """The records of one checkpoint interval, waiting in a local spool file.

    The spool stays in memory up to ``memory_bytes`` and moves to the local temp
    directory beyond it; for Parquet, the batches of the row group being collected
    and the writer into the spool. A barrier closes an interval and the next one
    opens at once; the closed one is staged later, off the barrier path.
    """

    def __init__(self, *, fmt: str, memory_bytes: int) -> None:
        self.fmt = fmt
        self.memory_bytes = memory_bytes
        self.checkpoint_id = 0
        self.records = 0
        self._spool: IO[bytes] | None = None
        self._arrow: list[pa.RecordBatch] = []
        self._arrow_bytes = 0
        self._parquet: pq.ParquetWriter | None = None

    def _open_spool(self) -> IO[bytes]:
        if self._spool is None:
            self._spool = tempfile.SpooledTemporaryFile(  # noqa: SIM115 - closed in close()
                max_size=self.memory_bytes, prefix="cjob-sink-")
        return self._spool

    def write(self, batch: Batch) -> None:
        if self.fmt == "jsonl":
            lines = [json.dumps(row, separators=(",", ":"), default=str).encode("utf-8")
                     for row in batch.rows]
            lines.append(b"")
            self._open_spool().write(b"\n".join(lines))
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
            self._parquet = pq.ParquetWriter(self._open_spool(), table.schema,
                                             use_dictionary=dictionary_columns(table))
        self._parquet.write_table(table)
        self._arrow = []
        self._arrow_bytes = 0

    def stage(self, fs: FileSystem, staging: str) -> None:
        """Copy the spool to the staging file, a megabyte at a time; may be repeated.

        The staging file is durable when this returns (the file system's writer
        closed it); a failure leaves the spool intact for another try.
        """
        if self.fmt == "parquet":
            self._flush_row_group()
            if self._parquet is not None:
                self._parquet.close()
                self._parquet = None
        spool = self._open_spool()
        spool.seek(0)
        with fs.open_write(staging) as out:
            shutil.copyfileobj(spool, out, 1 << 20)
            # Killed here, the staging file is incomplete and no checkpoint names it.
            maybe_fail("subtask.during-pre-commit", self.checkpoint_id)

    def close(self) -> None:
        if self._parquet is not None:
            self._parquet.close()
            self._parquet = None
        if self._spool is not None:
            self._spool.close()
            self._spool = None
        self._arrow = []
        self._arrow_bytes = 0
