"""Reading one Parquet file batch by batch, from a row offset.

A Parquet file is read batch by batch through its row groups. The position is the
row offset in the file; a reader that starts at row ``n`` skips whole row groups by
the row counts of the file's metadata and drops the rest of ``n`` from the first row
group it reads. Only the columns the pipeline reads are decoded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from job_runtime.records import Batch
from job_runtime.sources.source_contract import SplitReader


class ParquetReader(SplitReader):
    """Reads one Parquet file batch by batch from a row offset; see the module docstring."""

    def __init__(self, *, file: IO[bytes], offset: int, batch_size: int,
                 columns: frozenset[str] | None) -> None:
        self._file = file
        self._offset = offset
        parquet = pq.ParquetFile(file)
        metadata = parquet.metadata
        first, skip = 0, offset
        while first < metadata.num_row_groups and skip >= metadata.row_group(first).num_rows:
            skip -= metadata.row_group(first).num_rows
            first += 1
        names = None
        if columns is not None:
            names = [n for n in parquet.schema_arrow.names if n in columns] or None
        self._skip = skip
        self._batches: Iterator[pa.RecordBatch] = iter(())
        if first < metadata.num_row_groups:
            self._batches = parquet.iter_batches(
                batch_size=batch_size, row_groups=list(range(first, metadata.num_row_groups)),
                columns=names)

    def read_batch(self) -> Batch | None:
        for batch in self._batches:
            if self._skip:
                if batch.num_rows <= self._skip:
                    self._skip -= batch.num_rows
                    continue
                batch = batch.slice(self._skip)
                self._skip = 0
            if not batch.num_rows:
                continue
            self._offset += batch.num_rows
            return Batch(arrow=batch)
        return None

    def position(self) -> int:
        return self._offset

    def close(self) -> None:
        self._batches = iter(())
        self._file.close()
