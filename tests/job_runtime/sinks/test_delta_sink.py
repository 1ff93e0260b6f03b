"""What only the Delta sink does (the contract it shares with the Iceberg sink is
test_table_sink_contract.py): each interval one Delta commit carrying its subtask's
application transaction, the checkpoint id its version; a merge's rows reduced to the
last per key; a send the table's schema refuses; a wrong sink refused when built."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from table_sinks import complete_intervals, open_table_writer

from job_runtime.errors import PipelineDefinitionError
from job_runtime.records import Batch
from job_runtime.sinks import delta
from job_runtime.sinks.delta import DeltaSender, app_id
from job_runtime.sinks.failures import RejectedRecordError
from job_runtime.sinks.table_rows import last_row_per_key


def test_each_interval_is_one_commit_whose_transaction_version_is_its_checkpoint(
        tmp_path: Path) -> None:
    table = tmp_path / "clicks"
    writer = open_table_writer(delta(str(table)), staging=tmp_path / "staging")
    complete_intervals(writer, [Batch(rows=[{"user": "ann", "clicks": n}]) for n in (1, 2)])
    log = DeltaTable(str(table))
    assert log.version() == 1, "two commits: versions 0 and 1"
    assert log.transaction_version(app_id("sums-u1", 0)) == 2
    assert log.transaction_version(app_id("sums-u1", 1)) is None


def test_the_last_row_of_each_key_wins_within_an_interval() -> None:
    records = pa.table({"k": ["a", "b", "a", "c", "b"], "v": [1, 2, 3, 4, 5]})
    assert last_row_per_key(records, ["k"]).to_pylist() == [
        {"k": "a", "v": 3}, {"k": "c", "v": 4}, {"k": "b", "v": 5}]


def test_a_send_the_tables_schema_refuses_is_a_rejected_record(tmp_path: Path) -> None:
    sender = DeltaSender(uri=str(tmp_path / "t"), mode="append", key=(), partition_by=(),
                         storage_options={})
    sender.open(job_id="x")
    sender.send(pa.table({"n": [1]}), checkpoint_id=1, subtask=0)
    with pytest.raises(RejectedRecordError):
        sender.send(pa.table({"other": [1]}), checkpoint_id=2, subtask=0)


@pytest.mark.parametrize(("args", "problem"), [
    ({"uri": ""}, "the table's path"),
    ({"uri": "t", "mode": "upsert"}, "mode must be one of append, merge"),
    ({"uri": "t", "mode": "merge"}, "needs key="),
])
def test_a_wrong_sink_is_refused_when_the_pipeline_is_built(
        args: dict[str, str], problem: str) -> None:
    with pytest.raises(PipelineDefinitionError, match=problem):
        delta(**args)  # type: ignore[arg-type]
