"""The Iceberg sink: each completed interval one snapshot whose summary names its
subtask's checkpoint, so a send repeated after a crash is recognised in the table; an
embedded SQLite catalog by default; appends and merges; a schema the table refuses in
one sentence."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from job_runtime.errors import PipelineDefinitionError
from job_runtime.records import Batch
from job_runtime.sinks import iceberg
from job_runtime.sinks.commit import CommitRetry
from job_runtime.sinks.failures import SinkFailedError
from job_runtime.sinks.iceberg import IcebergSender, embedded_catalog, snapshot_property
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter
from job_runtime.sinks.write_ahead import WriteAheadWriter

QUICK = CommitRetry(attempts=2, first_delay=0.0, max_delay=0.0)
TABLE = "lake.clicks"


def open_writer(warehouse: Path, staging: Path, *, job_id: str = "sums-u1",
                **options: object) -> SinkWriter:
    sink = iceberg(TABLE, warehouse=str(warehouse), **options)  # type: ignore[arg-type]
    sink.commit_retry = QUICK
    return sink.open(context=SinkContext(subtask=0, parallelism=1, attempt_tag="a1e1",
                                         job_id=job_id, staging_root=str(staging),
                                         restored_job=job_id, stall_timeout=0.0))


def rows(*pairs: tuple[str, int]) -> Batch:
    return Batch(rows=[{"user": user, "clicks": clicks} for user, clicks in pairs])


def read(warehouse: Path) -> list[tuple[str, int]]:
    catalog = load_catalog("default", **embedded_catalog(str(warehouse)))
    found = catalog.load_table(TABLE).scan().to_arrow().to_pylist()
    return sorted((row["user"], row["clicks"]) for row in found)


def test_intervals_land_once_their_checkpoints_complete_each_snapshot_naming_it(
        tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    writer = open_writer(warehouse, tmp_path / "staging")
    writer.write(rows(("ann", 1), ("bob", 1)))
    writer.snapshot(1)
    assert not (warehouse / "catalog.db").exists(), "nothing before the checkpoint completes"
    writer.notify_complete(1)
    writer.write(rows(("ann", 2)))
    writer.snapshot(2)
    writer.notify_complete(2)
    assert read(warehouse) == [("ann", 1), ("ann", 2), ("bob", 1)]
    table = load_catalog("default", **embedded_catalog(str(warehouse))).load_table(TABLE)
    assert [s.summary.get(snapshot_property("sums-u1", 0)) for s in table.snapshots()] == [
        "1", "2"]


def test_a_restore_after_a_crash_past_the_tables_commit_sends_nothing_twice(
        tmp_path: Path) -> None:
    warehouse, staging = tmp_path / "warehouse", tmp_path / "staging"
    writer = open_writer(warehouse, staging)
    writer.write(rows(("ann", 1)))
    state = writer.snapshot(1)
    writer.notify_complete(1)
    again = open_writer(warehouse, staging)
    assert isinstance(again, WriteAheadWriter)
    again.restore([state])
    assert read(warehouse) == [("ann", 1)]


def test_an_interval_that_never_reached_the_table_is_sent_by_the_restore(
        tmp_path: Path) -> None:
    warehouse, staging = tmp_path / "warehouse", tmp_path / "staging"
    writer = open_writer(warehouse, staging)
    writer.write(rows(("ann", 1)))
    state = writer.snapshot(1)         # the checkpoint completed; the send never ran
    open_writer(warehouse, staging).restore([state])
    assert read(warehouse) == [("ann", 1)]


def test_each_subtask_and_each_job_has_its_own_record(tmp_path: Path) -> None:
    catalog = embedded_catalog(str(tmp_path / "warehouse"))
    sender = IcebergSender(table=TABLE, catalog=catalog, catalog_name="default",
                           mode="append", key=())
    sender.open(job_id="sums-u1")
    assert not sender.is_committed(subtask=0, checkpoint_id=1)     # no table yet
    sender.send(pa.table({"n": [1]}), checkpoint_id=5, subtask=0)
    assert sender.is_committed(subtask=0, checkpoint_id=5)
    assert sender.is_committed(subtask=0, checkpoint_id=3)
    assert not sender.is_committed(subtask=0, checkpoint_id=6)
    assert not sender.is_committed(subtask=1, checkpoint_id=5)
    sender.open(job_id="sums-u2")
    assert not sender.is_committed(subtask=0, checkpoint_id=5)


def test_a_merge_keeps_the_latest_row_per_key(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    writer = open_writer(warehouse, tmp_path / "staging", mode="merge", key="user")
    writer.write(rows(("ann", 1), ("bob", 1), ("ann", 2)))
    writer.snapshot(1)
    writer.notify_complete(1)
    writer.write(rows(("bob", 5), ("cid", 1)))
    writer.snapshot(2)
    writer.notify_complete(2)
    assert read(warehouse) == [("ann", 2), ("bob", 5), ("cid", 1)]


def test_rows_the_tables_schema_refuses_end_the_sink_in_one_sentence(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    writer = open_writer(warehouse, tmp_path / "staging")
    writer.write(rows(("ann", 1)))
    writer.snapshot(1)
    writer.notify_complete(1)
    writer.write(Batch(rows=[{"user": "bob", "clicks": 1, "page": "/x"}]))
    writer.snapshot(2)
    with pytest.raises(SinkFailedError) as failed:
        writer.notify_complete(2, final=True)
    assert "refuses the interval" in str(failed.value) and "\n" not in str(failed.value)
    assert read(warehouse) == [("ann", 1)]


@pytest.mark.parametrize(("args", "problem"), [
    ({"table": "clicks", "warehouse": "w"}, "namespace.name"),
    ({"table": "db.t"}, "either catalog= .* or warehouse="),
    ({"table": "db.t", "warehouse": "w", "catalog": {"uri": "x"}}, "either catalog="),
    ({"table": "db.t", "warehouse": "w", "mode": "merge"}, "needs key="),
])
def test_a_wrong_sink_is_refused_when_the_pipeline_is_built(
        args: dict[str, object], problem: str) -> None:
    with pytest.raises(PipelineDefinitionError, match=problem):
        iceberg(**args)  # type: ignore[arg-type]
