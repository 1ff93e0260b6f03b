"""Writing keyed state from a table: a snapshot that reads back as the table, and that a
job's restore takes as a snapshot (no allowForeignJob), its state keyed as the job's."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.store.file import FileCheckpointStore, advance_attempt
from job_runtime.execution.driver.driver_settings import DriverSettings
from job_runtime.execution.driver.restore import resolve_restore
from job_runtime.records import key_group_of
from job_runtime.state import read
from job_runtime.state.snapshot_writer import StateWriteError, write

TOTALS = pa.table({"key": [0, 1, 2, 96], "value": [10, 11, 12, 96_000]})


def test_a_reduces_records_read_back_as_the_rows_written(tmp_path: Path) -> None:
    path = write(TOTALS, target=tmp_path.as_uri(), name="seed", operator="03-reduce",
                 key="key")
    assert path == f"{tmp_path.as_uri()}/seed-bootstrap/chk-1/_metadata"
    table = read(path, operator="03-reduce")
    rows = {row["key"]: row for row in table.to_pylist()}
    assert {k: r["value"] for k, r in rows.items()} == {0: {"key": 0, "value": 10},
                                                        1: {"key": 1, "value": 11},
                                                        2: {"key": 2, "value": 12},
                                                        96: {"key": 96, "value": 96_000}}
    assert all(r["state"] == "value" for r in rows.values())
    assert rows[96]["key_group"] == key_group_of(96, 128)


def test_a_process_functions_value_state_comes_from_a_column_of_a_data_frame(
        tmp_path: Path) -> None:
    frame = pd.DataFrame({"user": ["ann", "bob"], "region": ["eu", "us"], "seen": [3, 5]})
    path = write(frame, target=tmp_path.as_uri(), name="users", operator="visits",
                 key=["user", "region"], state="count", value="seen", max_parallelism=16)
    table = read(path, operator="visits", state="count")
    # A key of two columns is a tuple in the job, a list in Arrow.
    assert {tuple(r["key"]): r["value"] for r in table.to_pylist()} == {
        ("ann", "eu"): 3, ("bob", "us"): 5}


def test_a_job_restores_it_as_a_snapshot_without_allowing_foreign_jobs(tmp_path: Path) -> None:
    path = write(TOTALS, target=tmp_path.as_uri(), name="seed", operator="03-reduce",
                 key="key")
    directory = str(tmp_path / "store")
    advance_attempt(directory, 1)
    store = FileCheckpointStore(directory, retained=3, attempt=1)
    storage = CheckpointStorage(f"file://{tmp_path}/ckpt", "sums-u1")
    settings = DriverSettings(job_name="sums", job_uid="u1", entrypoint="job:build",
                              attempt=1, restore=path)
    resolution = resolve_restore(settings=settings, storage=storage, store=store)
    assert resolution.checkpoint is not None
    assert resolution.checkpoint.metadata_path == path
    assert resolution.metadata is not None and resolution.metadata.sources == {}
    assert any("restoring snapshot 'seed'" in note for note in resolution.notes)


@pytest.mark.parametrize(("table", "kwargs", "problem"), [
    (TOTALS, {"key": "user"}, "no column 'user'"),
    (TOTALS, {"key": "key", "state": "count", "value": "n"}, "no column 'n'"),
    (pa.table({"key": [1, 1], "value": [2, 3]}), {"key": "key"}, "key 1 has two rows"),
    (TOTALS, {"key": "key", "name": "../up"}, "the snapshot's name"),
])
def test_a_table_that_cannot_be_the_state_is_refused_in_one_sentence(
        tmp_path: Path, table: pa.Table, kwargs: dict[str, str], problem: str) -> None:
    arguments = {"target": tmp_path.as_uri(), "name": "seed", "operator": "03-reduce",
                 **kwargs}
    with pytest.raises(StateWriteError, match=problem):
        write(table, **arguments)  # type: ignore[arg-type]
    assert not list(tmp_path.rglob("_metadata"))
