"""Partial aggregation before the keyed exchange of an ``aggregate`` (a combiner).

Without it, every record crosses the exchange: it is hash-partitioned, encoded,
tagged, sent, decoded and only then aggregated. With it, the sending task keeps
the records of the last moments, and sends for each distinct key one partial row
(count, sums, minima, maxima) instead of all of that key's records; the keyed
operator folds partial rows into its state exactly as it folds records. This is
what Spark does before a shuffle (``partial_count``/``partial_sum``) and what
Flink calls local aggregation.

Exactly-once is kept because the buffer never outlives a barrier: the task
flushes it before it forwards a barrier (and when its input ends), so every
record read before the source's snapshot reaches the keyed state before that
checkpoint's barrier, in aligned and unaligned mode alike. The buffer is not
state: it is always empty at a barrier.

The buffer is flushed early when it holds ``max_records`` records (a memory
bound) or its oldest record has waited ``max_delay`` seconds (a latency bound).
A key is counted once per flush, so the operator's output (the touched keys'
current aggregates) comes once per flush rather than once per input batch; the
aggregates themselves are the same.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from job_runtime.operators.accumulators import (
    accumulator_specs,
    fold_keys,
    partial_batch,
)
from job_runtime.pipeline import KeyedOp
from job_runtime.records import Batch

DEFAULT_MAX_RECORDS = 1_000_000
"""Records buffered before a flush: at most a few tens of MB of key and value columns."""
DEFAULT_MAX_DELAY = 0.25
"""Seconds the oldest buffered record waits at most (besides the barrier flush)."""


class Combiner:
    """Buffers the columns an ``aggregate`` needs and turns them into partial rows."""

    def __init__(self, *, op: KeyedOp, max_records: int = DEFAULT_MAX_RECORDS,
                 max_delay: float = DEFAULT_MAX_DELAY) -> None:
        key = op.key.key
        assert isinstance(key, str), "aggregate() is keyed by a column name"
        self.key_column = key
        self.specs = accumulator_specs(op.aggregates)
        values = sorted({c for _, c in self.specs.values() if c is not None})
        self.columns = list(dict.fromkeys([key, *values]))
        self.max_records = max_records
        self.max_delay = max_delay
        self._parts: dict[str, list[pa.Array | pa.ChunkedArray]] = {c: [] for c in self.columns}
        self._records = 0
        self._oldest = 0.0
        self.records_in = 0
        self.rows_out = 0

    def __len__(self) -> int:
        return self._records

    def add(self, batch: Batch) -> None:
        if not len(batch):
            return
        arrow = batch.arrow
        if not self._records:
            self._oldest = time.monotonic()
        for column in self.columns:
            self._parts[column].append(arrow.column(column))
        self._records += arrow.num_rows
        self.records_in += arrow.num_rows

    def due(self) -> bool:
        """Whether the buffer is full or its oldest record waited long enough."""
        if not self._records:
            return False
        return (self._records >= self.max_records
                or time.monotonic() - self._oldest >= self.max_delay)

    def flush(self) -> Batch | None:
        """One partial row per distinct key buffered, or ``None`` when nothing is."""
        if not self._records:
            return None
        key_type = self._parts[self.key_column][0].type
        columns: dict[str, np.ndarray] = {}
        for column, parts in self._parts.items():
            chunks = [np.asarray(p.to_numpy(zero_copy_only=False)) for p in parts]
            columns[column] = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
        self._parts = {c: [] for c in self.columns}
        self._records = 0
        uniques, folded = fold_keys(keys=columns[self.key_column],
                                    column=columns.__getitem__, specs=self.specs)
        out = partial_batch(key_column=self.key_column,
                            keys=pa.array(np.asarray(uniques), type=key_type), folded=folded)
        self.rows_out += out.num_rows
        return Batch(arrow=out)
