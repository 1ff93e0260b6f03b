"""What every table sink keeps, one suite over the Delta and the Iceberg sink: an
interval lands in the table only once its checkpoint completes, a send repeated after
a crash is recognised in the table itself (no second copy), one that never reached it
is sent by the restore, each subtask and each job keeps its own record, a merge keeps
the latest row per key, and a schema the table refuses ends the sink in one sentence.
What only one of them records (Delta's transaction versions, Iceberg's snapshot
summaries) and how each refuses a wrong sink are in their own test files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyiceberg.catalog import load_catalog
from table_sinks import open_table_writer

from job_runtime.records import Batch
from job_runtime.sinks import delta, iceberg
from job_runtime.sinks.arrival import TransactionalSender
from job_runtime.sinks.delta import DeltaSender
from job_runtime.sinks.failures import SinkFailedError
from job_runtime.sinks.iceberg import IcebergSender, embedded_catalog
from job_runtime.sinks.sink_contract import SinkWriter
from job_runtime.sinks.write_ahead import TransactionalSink, WriteAheadWriter

ICEBERG_TABLE = "lake.clicks"


@dataclass(frozen=True)
class TableKind:
    """One table format as the suite drives it; ``root`` is where its table lives (the
    Delta table's folder, the Iceberg warehouse)."""

    sink: Callable[..., TransactionalSink]
    """``sink(root, **options)``: the sink as a pipeline names it."""
    rows: Callable[[Path], list[dict[str, Any]]]
    """The table's rows, or ``[]`` when there is no table yet."""
    sender: Callable[[Path], TransactionalSender]
    """A sender appending to the table at ``root``, not opened yet."""


def _delta_rows(root: Path) -> list[dict[str, Any]]:
    if not root.exists():
        return []
    found: list[dict[str, Any]] = DeltaTable(str(root)).to_pyarrow_table().to_pylist()
    return found


def _iceberg_rows(root: Path) -> list[dict[str, Any]]:
    if not (root / "catalog.db").exists():
        return []
    catalog = load_catalog("default", **embedded_catalog(str(root)))
    found: list[dict[str, Any]] = catalog.load_table(ICEBERG_TABLE).scan().to_arrow().to_pylist()
    return found


KINDS = {
    "delta": TableKind(
        sink=lambda root, **options: delta(str(root), **options),
        rows=_delta_rows,
        sender=lambda root: DeltaSender(uri=str(root), mode="append", key=(),
                                        partition_by=(), storage_options={})),
    "iceberg": TableKind(
        sink=lambda root, **options: iceberg(ICEBERG_TABLE, warehouse=str(root), **options),
        rows=_iceberg_rows,
        sender=lambda root: IcebergSender(table=ICEBERG_TABLE,
                                          catalog=embedded_catalog(str(root)),
                                          catalog_name="default", mode="append", key=())),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> TableKind:
    return KINDS[request.param]


def open_writer(kind: TableKind, root: Path, staging: Path, *, job_id: str = "sums-u1",
                **options: object) -> SinkWriter:
    return open_table_writer(kind.sink(root, **options), staging=staging, job_id=job_id)


def rows(*pairs: tuple[str, int]) -> Batch:
    return Batch(rows=[{"user": user, "clicks": clicks} for user, clicks in pairs])


def read(kind: TableKind, root: Path) -> list[tuple[str, int]]:
    return sorted((row["user"], row["clicks"]) for row in kind.rows(root))


def test_an_interval_lands_only_once_its_checkpoint_completes(
        kind: TableKind, tmp_path: Path) -> None:
    root = tmp_path / "table"
    writer = open_writer(kind, root, tmp_path / "staging")
    writer.write(rows(("ann", 1), ("bob", 1)))
    writer.snapshot(1)
    assert read(kind, root) == [], "nothing before the checkpoint completes"
    writer.notify_complete(1)
    writer.write(rows(("ann", 2)))
    writer.snapshot(2)
    writer.notify_complete(2)
    assert read(kind, root) == [("ann", 1), ("ann", 2), ("bob", 1)]


def test_a_restore_after_a_crash_past_the_tables_commit_sends_nothing_twice(
        kind: TableKind, tmp_path: Path) -> None:
    root, staging = tmp_path / "table", tmp_path / "staging"
    writer = open_writer(kind, root, staging)
    writer.write(rows(("ann", 1)))
    state = writer.snapshot(1)
    writer.notify_complete(1)          # committed to the table ...
    # ... and the attempt dies before its checkpoint store heard: the next one restores
    # checkpoint 1 with the interval still listed as pending.
    again = open_writer(kind, root, staging)
    assert isinstance(again, WriteAheadWriter)
    again.restore([state])
    assert read(kind, root) == [("ann", 1)]


def test_an_interval_that_never_reached_the_table_is_sent_by_the_restore(
        kind: TableKind, tmp_path: Path) -> None:
    root, staging = tmp_path / "table", tmp_path / "staging"
    writer = open_writer(kind, root, staging)
    writer.write(rows(("ann", 1)))
    state = writer.snapshot(1)         # the checkpoint completed; the send never ran
    open_writer(kind, root, staging).restore([state])
    assert read(kind, root) == [("ann", 1)]


def test_each_subtask_and_each_job_has_its_own_record(kind: TableKind, tmp_path: Path) -> None:
    root = tmp_path / "table"
    sender = kind.sender(root)
    sender.open(job_id="sums-u1")
    assert not sender.is_committed(subtask=0, checkpoint_id=1)   # no table yet
    sender.send(pa.table({"n": [1]}), checkpoint_id=5, subtask=0)
    assert sender.is_committed(subtask=0, checkpoint_id=5)
    assert sender.is_committed(subtask=0, checkpoint_id=4)       # sent in checkpoint order
    assert not sender.is_committed(subtask=0, checkpoint_id=6)
    assert not sender.is_committed(subtask=1, checkpoint_id=5)
    other = kind.sender(root)
    other.open(job_id="sums-u2")
    assert not other.is_committed(subtask=0, checkpoint_id=5)


def test_a_merge_keeps_the_latest_row_per_key(kind: TableKind, tmp_path: Path) -> None:
    root = tmp_path / "table"
    writer = open_writer(kind, root, tmp_path / "staging", mode="merge", key="user")
    writer.write(rows(("ann", 1), ("bob", 1), ("ann", 2)))
    writer.snapshot(1)
    writer.notify_complete(1)
    writer.write(rows(("bob", 5), ("cid", 1)))
    writer.snapshot(2)
    writer.notify_complete(2)
    assert read(kind, root) == [("ann", 2), ("bob", 5), ("cid", 1)]


def test_rows_the_tables_schema_refuses_end_the_sink_in_one_sentence(
        kind: TableKind, tmp_path: Path) -> None:
    root = tmp_path / "table"
    writer = open_writer(kind, root, tmp_path / "staging")
    writer.write(rows(("ann", 1)))
    writer.snapshot(1)
    writer.notify_complete(1)
    writer.write(Batch(rows=[{"user": "bob", "clicks": 1, "page": "/x"}]))
    writer.snapshot(2)
    with pytest.raises(SinkFailedError) as failed:
        writer.notify_complete(2, final=True)
    assert "refuses the interval" in str(failed.value) and "\n" not in str(failed.value)
    assert read(kind, root) == [("ann", 1)]
