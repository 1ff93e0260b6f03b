"""The Delta sink: each completed interval one Delta commit carrying its subtask's
transaction version, so a send repeated after a crash is recognised in the table itself;
appends and merges by key; a schema the table refuses in one sentence."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from job_runtime.errors import PipelineDefinitionError
from job_runtime.records import Batch
from job_runtime.sinks import delta
from job_runtime.sinks.commit import CommitRetry
from job_runtime.sinks.delta import DeltaSender, app_id
from job_runtime.sinks.failures import RejectedRecordError, SinkFailedError
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter
from job_runtime.sinks.table_rows import last_row_per_key
from job_runtime.sinks.write_ahead import WriteAheadWriter

QUICK = CommitRetry(attempts=2, first_delay=0.0, max_delay=0.0)


def open_writer(table: Path, staging: Path, *, subtask: int = 0, job_id: str = "sums-u1",
                **options: object) -> SinkWriter:
    sink = delta(str(table), **options)  # type: ignore[arg-type]
    sink.commit_retry = QUICK
    return sink.open(context=SinkContext(subtask=subtask, parallelism=2, attempt_tag="a1e1",
                                         job_id=job_id, staging_root=str(staging),
                                         restored_job=job_id, stall_timeout=0.0))


def rows(*pairs: tuple[str, int]) -> Batch:
    return Batch(rows=[{"user": user, "clicks": clicks} for user, clicks in pairs])


def read(table: Path) -> list[tuple[str, int]]:
    found = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    return sorted((row["user"], row["clicks"]) for row in found)


def test_an_interval_lands_as_one_commit_once_its_checkpoint_completes(tmp_path: Path) -> None:
    table = tmp_path / "clicks"
    writer = open_writer(table, tmp_path / "staging")
    writer.write(rows(("ann", 1), ("bob", 1)))
    writer.snapshot(1)
    assert not table.exists(), "nothing before the checkpoint completes"
    writer.notify_complete(1)
    writer.write(rows(("ann", 2)))
    writer.snapshot(2)
    writer.notify_complete(2)
    assert read(table) == [("ann", 1), ("ann", 2), ("bob", 1)]
    log = DeltaTable(str(table))
    assert log.version() == 1
    assert log.transaction_version(app_id("sums-u1", 0)) == 2


def test_a_restore_after_a_crash_past_the_tables_commit_sends_nothing_twice(
        tmp_path: Path) -> None:
    table, staging = tmp_path / "clicks", tmp_path / "staging"
    writer = open_writer(table, staging)
    writer.write(rows(("ann", 1)))
    state = writer.snapshot(1)
    writer.notify_complete(1)          # committed to the table ...
    # ... and the attempt dies before its checkpoint store heard: the next one restores
    # checkpoint 1 with the interval still listed as pending.
    again = open_writer(table, staging)
    assert isinstance(again, WriteAheadWriter)
    again.restore([state])
    assert read(table) == [("ann", 1)]


def test_an_interval_that_never_reached_the_table_is_sent_by_the_restore(
        tmp_path: Path) -> None:
    table, staging = tmp_path / "clicks", tmp_path / "staging"
    writer = open_writer(table, staging)
    writer.write(rows(("ann", 1)))
    state = writer.snapshot(1)         # the checkpoint completed; the send never ran
    again = open_writer(table, staging)
    again.restore([state])
    assert read(table) == [("ann", 1)]


def test_each_subtask_and_each_job_has_its_own_transaction(tmp_path: Path) -> None:
    sender = DeltaSender(uri=str(tmp_path / "t"), mode="append", key=(), partition_by=(),
                         storage_options={})
    sender.open(job_id="sums-u1")
    assert not sender.is_committed(subtask=0, checkpoint_id=1)   # no table yet
    sender.send(pa.table({"n": [1]}), checkpoint_id=5, subtask=0)
    assert sender.is_committed(subtask=0, checkpoint_id=5)
    assert sender.is_committed(subtask=0, checkpoint_id=4)       # sent in checkpoint order
    assert not sender.is_committed(subtask=0, checkpoint_id=6)
    assert not sender.is_committed(subtask=1, checkpoint_id=5)
    other = DeltaSender(uri=str(tmp_path / "t"), mode="append", key=(), partition_by=(),
                        storage_options={})
    other.open(job_id="sums-u2")
    assert not other.is_committed(subtask=0, checkpoint_id=5)


def test_a_merge_keeps_the_latest_row_per_key(tmp_path: Path) -> None:
    table = tmp_path / "latest"
    writer = open_writer(table, tmp_path / "staging", mode="merge", key="user")
    writer.write(rows(("ann", 1), ("bob", 1), ("ann", 2)))
    writer.snapshot(1)
    writer.notify_complete(1)
    writer.write(rows(("bob", 5), ("cid", 1)))
    writer.snapshot(2)
    writer.notify_complete(2)
    assert read(table) == [("ann", 2), ("bob", 5), ("cid", 1)]


def test_the_last_row_of_each_key_wins_within_an_interval() -> None:
    records = pa.table({"k": ["a", "b", "a", "c", "b"], "v": [1, 2, 3, 4, 5]})
    assert last_row_per_key(records, ["k"]).to_pylist() == [
        {"k": "a", "v": 3}, {"k": "c", "v": 4}, {"k": "b", "v": 5}]


def test_rows_the_tables_schema_refuses_end_the_sink_in_one_sentence(tmp_path: Path) -> None:
    table = tmp_path / "clicks"
    writer = open_writer(table, tmp_path / "staging")
    writer.write(rows(("ann", 1)))
    writer.snapshot(1)
    writer.notify_complete(1)
    writer.write(Batch(rows=[{"user": "bob", "clicks": 1, "page": "/x"}]))
    writer.snapshot(2)
    with pytest.raises(SinkFailedError) as failed:
        writer.notify_complete(2, final=True)
    assert "refuses the interval" in str(failed.value) and "\n" not in str(failed.value)
    assert read(table) == [("ann", 1)]
    sender = DeltaSender(uri=str(table), mode="append", key=(), partition_by=(),
                         storage_options={})
    sender.open(job_id="x")
    with pytest.raises(RejectedRecordError):
        sender.send(pa.table({"other": [1]}), checkpoint_id=1, subtask=0)


@pytest.mark.parametrize(("args", "problem"), [
    ({"uri": ""}, "the table's path"),
    ({"uri": "t", "mode": "upsert"}, "mode must be one of append, merge"),
    ({"uri": "t", "mode": "merge"}, "needs key="),
])
def test_a_wrong_sink_is_refused_when_the_pipeline_is_built(
        args: dict[str, str], problem: str) -> None:
    with pytest.raises(PipelineDefinitionError, match=problem):
        delta(**args)  # type: ignore[arg-type]
