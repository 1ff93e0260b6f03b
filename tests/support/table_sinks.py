"""What the table sinks' tests share: a sink's writer opened as a subtask opens it,
with commit retries that do not wait, and intervals run through it checkpoint by
checkpoint."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from job_runtime.records import Batch
from job_runtime.sinks.commit import CommitRetry
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter
from job_runtime.sinks.write_ahead import TransactionalSink

QUICK = CommitRetry(attempts=2, first_delay=0.0, max_delay=0.0)


def open_table_writer(sink: TransactionalSink, *, staging: Path, job_id: str = "sums-u1",
                      subtask: int = 0, parallelism: int = 2) -> SinkWriter:
    sink.commit_retry = QUICK
    return sink.open(context=SinkContext(subtask=subtask, parallelism=parallelism,
                                         attempt_tag="a1e1", job_id=job_id,
                                         staging_root=str(staging), restored_job=job_id,
                                         stall_timeout=0.0))


def complete_intervals(writer: SinkWriter, intervals: Sequence[Batch]) -> None:
    """Each batch as the interval of checkpoint 1, 2, ..., each checkpoint completed."""
    for checkpoint, batch in enumerate(intervals, start=1):
        writer.write(batch)
        writer.snapshot(checkpoint)
        writer.notify_complete(checkpoint)
