"""The table reader is Spark reading tables as their formats say: a Delta table
through its log (a file an overwrite removed is not read), an Iceberg table through
its catalog's current snapshot, and a table that is not there is an error in Spark's
words, not an empty list."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.catalog import load_catalog

from e2e.lakereader import LakeReader, LakeReadError
from job_runtime.sinks.iceberg import embedded_catalog


def test_a_delta_table_is_read_through_its_log(lake_reader: LakeReader, tmp_path: Path) -> None:
    table = tmp_path / "delta"
    write_deltalake(str(table), pa.table({"key": [1, 2], "value": [10, 20]}))
    write_deltalake(str(table), pa.table({"key": [3], "value": [30]}), mode="overwrite")
    assert len(list(table.glob("*.parquet"))) == 2, "the overwritten file is still there"
    assert lake_reader.delta_rows(table) == [{"key": 3, "value": 30}]


def test_an_iceberg_table_is_read_through_its_catalog(lake_reader: LakeReader,
                                                      tmp_path: Path) -> None:
    warehouse = tmp_path / "iceberg"
    warehouse.mkdir()
    properties = embedded_catalog(str(warehouse))
    catalog = load_catalog("default", **properties)
    catalog.create_namespace("lake")
    table = catalog.create_table("lake.t", schema=pa.schema([("key", pa.int64()),
                                                             ("name", pa.string())]))
    table.append(pa.table({"key": [1, 2], "name": ["a", "b"]}))
    table.overwrite(pa.table({"key": [5], "name": ["e"]}))
    assert lake_reader.iceberg_rows("lake.t", catalog=properties) == [{"key": 5, "name": "e"}]


def test_a_table_that_is_not_there_fails_in_sparks_words(lake_reader: LakeReader,
                                                         tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(LakeReadError, match="Spark could not read the Delta table") as raised:
        lake_reader.delta_rows(tmp_path / "empty")
    assert "DELTA_" in raised.value.problem or "not a Delta table" in raised.value.problem
    # The reader goes on serving after a failed read.
    write_deltalake(str(tmp_path / "t"), pa.table({"key": [1]}))
    assert lake_reader.delta_rows(tmp_path / "t") == [{"key": 1}]
