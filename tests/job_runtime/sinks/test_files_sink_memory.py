"""The files sink's memory does not grow with the records of one checkpoint interval.

A long interval (or a checkpoint that cannot complete for a while) means many
records between two barriers. The sink must keep at most a bounded amount of
them in memory and spill the rest to its local staging file, or a busy job dies
of memory exhaustion just before its next checkpoint.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from job_runtime.records import Batch
from job_runtime.sinks import files
from job_runtime.sinks.sink_contract import SinkContext

PADDING = "x" * 200
BATCHES = 100
ROWS = 1000
MEMORY = 1 << 20


def batch(number: int) -> Batch:
    first = number * ROWS
    return Batch(rows=[{"n": first + i, "text": PADDING} for i in range(ROWS)])


def held_bytes() -> int:
    """Bytes the Python allocator and Arrow's memory pool hold right now."""
    return tracemalloc.get_traced_memory()[0] + pa.total_allocated_bytes()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_long_interval_keeps_a_bounded_part_of_its_records_in_memory(
        tmp_path: Path, fmt: str) -> None:
    context = SinkContext(subtask=0, parallelism=1, attempt_tag="a1e1")
    warm_up = files(str(tmp_path / "warm-up"), format=fmt, memory_bytes=MEMORY).open(
        context=context)
    warm_up.write(batch(0))  # the first write imports modules: not the sink's memory
    warm_up.snapshot(1)
    out = tmp_path / "out"
    writer = files(str(out), format=fmt, memory_bytes=MEMORY).open(context=context)
    written = 0
    tracemalloc.start()
    try:
        before = held_bytes()
        for number in range(BATCHES):
            records = batch(number)
            written += sum(len(json.dumps(r)) for r in records.rows)
            writer.write(records)
            del records
        held = held_bytes() - before
    finally:
        tracemalloc.stop()

    assert held < written / 5, f"the sink holds {held} of {written} bytes written in memory"
    writer.snapshot(1)
    writer.notify_complete(1)
    parts = [p for p in out.iterdir() if p.is_file()]
    assert len(parts) == 1
    if fmt == "parquet":
        numbers = pq.read_table(parts[0]).column("n").to_pylist()
    else:
        numbers = [json.loads(line)["n"] for line in parts[0].read_text().splitlines()]
    assert numbers == list(range(BATCHES * ROWS)), "spilled records lost or reordered"
