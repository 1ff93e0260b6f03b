"""What only the Iceberg sink does (the contract it shares with the Delta sink is
test_table_sink_contract.py): each interval one snapshot whose summary names its
subtask's checkpoint, in an embedded SQLite catalog by default; a wrong sink refused
when built."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog import load_catalog
from table_sinks import complete_intervals, open_table_writer

from job_runtime.errors import PipelineDefinitionError
from job_runtime.records import Batch
from job_runtime.sinks import iceberg
from job_runtime.sinks.iceberg import embedded_catalog, snapshot_property

TABLE = "lake.clicks"


def test_each_interval_is_one_snapshot_whose_summary_names_its_checkpoint(
        tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    writer = open_table_writer(iceberg(TABLE, warehouse=str(warehouse)),
                               staging=tmp_path / "staging", parallelism=1)
    complete_intervals(writer, [Batch(rows=[{"user": "ann", "clicks": n}]) for n in (1, 2)])
    assert (warehouse / "catalog.db").exists(), "the embedded catalog, in the warehouse"
    table = load_catalog("default", **embedded_catalog(str(warehouse))).load_table(TABLE)
    assert [s.summary.get(snapshot_property("sums-u1", 0)) for s in table.snapshots()] == [
        "1", "2"]


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
