"""The Delta and Iceberg sinks on real Spark: the running sum written into a table
through a subtask killed between the table's commit and the checkpoint store's, and a
driver killed before its sinks heard of a checkpoint, then restarted at three subtasks
instead of two; the table read back with
``deltalake`` / ``pyiceberg`` and by Spark with the connectors' own readers (Delta
Lake's, Iceberg's through its JDBC catalog) holds every row exactly once, and a merge
table ends with every key's final sum."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyiceberg.catalog import load_catalog
from runtime_harness import JOBS, EmbeddedRun, JobHarness, load_example

from e2e.lakereader import LakeReader
from job_runtime.sinks.iceberg import embedded_catalog

COUNT = 6000
RATE = 1000
KEYS = 97

verify = load_example("examples/running_sum/verify.py")


def table_rows(form: str, table: Path) -> list[dict[str, Any]]:
    if form == "iceberg":
        catalog = load_catalog("default", **embedded_catalog(str(table)))
        rows: list[dict[str, Any]] = catalog.load_table("lake.sums").scan().to_arrow().to_pylist()
        return rows
    found: list[dict[str, Any]] = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    return found


def spark_rows(reader: LakeReader, form: str, table: Path) -> list[dict[str, Any]]:
    if form == "iceberg":
        return reader.iceberg_rows("lake.sums", catalog=embedded_catalog(str(table)))
    return reader.delta_rows(table)


def ordered(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((row["key"], row["value"]) for row in rows)


@pytest.mark.parametrize("form", ["delta", "iceberg"])
def test_every_row_lands_once_through_crashes_at_each_commit_step(
        form: str, tmp_path: Path, embedded: Callable[..., EmbeddedRun],
        job_yaml: Callable[..., Path], lake_reader: LakeReader) -> None:
    table = tmp_path / "sums"
    name = f"{form}sums"
    job = job_yaml(tmp_path / "job.yaml", name=name, entrypoint="table_jobs:running_sum",
                   python_path=[str(JOBS)],
                   args={"count": COUNT, "rate": RATE, "table": str(table), "format": form})
    # A subtask killed after the table's commit, before anything else knew (the
    # relaunched stage must find the interval in the table and not send it again); and
    # a driver whose checkpoint was recorded but whose sinks were never told (the next
    # attempt must send it). No other kill: a checkpoint a kill declined would never
    # reach its fault point.
    faults = "subtask.write-ahead-after-send@3,driver.before-notify@5"
    run = embedded(job, state_dir=tmp_path / "state", name=name,
                   env={"CJOB_FAULTS": faults, "CJOB_FAULTS_DIR": str(tmp_path)})
    assert run.returncode == 0, run.explain()
    assert run.status["phase"] == "Succeeded", run.status
    assert len(list(tmp_path.glob(".cjob-fault-*"))) == 2, "not every fault point fired"

    rows = table_rows(form, table)
    assert verify.verify(rows, count=COUNT) == []
    assert len(rows) == COUNT, "one row per record, none lost or repeated"
    assert ordered(spark_rows(lake_reader, form, table)) == ordered(rows), \
        "Spark reads the table the package reads"


@pytest.mark.parametrize("form", ["delta", "iceberg"])
def test_a_merge_table_ends_with_every_keys_final_sum(
        form: str, tmp_path: Path, embedded: Callable[..., EmbeddedRun],
        job_yaml: Callable[..., Path], lake_reader: LakeReader) -> None:
    table = tmp_path / "latest"
    name = f"{form}latest"
    job = job_yaml(tmp_path / "job.yaml", name=name, entrypoint="table_jobs:running_sum",
                   python_path=[str(JOBS)],
                   args={"count": COUNT, "rate": RATE * 3, "table": str(table),
                         "format": form, "mode": "merge"})
    run = embedded(job, state_dir=tmp_path / "state", name=name,
                   env={"CJOB_FAULTS": "driver.before-notify@3",
                        "CJOB_FAULTS_DIR": str(tmp_path)})
    assert run.returncode == 0, run.explain()
    rows = table_rows(form, table)
    final = {row["key"]: row["value"] for row in rows}
    assert len(rows) == len(final) == KEYS, "one row per key"
    assert final == {key: sum(range(key, COUNT, KEYS)) for key in range(KEYS)}
    # Spark reads the merged table through its log (Delta) or its snapshots (Iceberg):
    # the files a merge rewrote are not read.
    assert ordered(spark_rows(lake_reader, form, table)) == ordered(rows)


@pytest.mark.parametrize("form", ["delta", "iceberg"])
def test_a_restart_at_three_subtasks_sends_the_unnotified_intervals_once(
        form: str, harness: JobHarness, lake_reader: LakeReader) -> None:
    table = harness.base / "sums"
    args = {"count": COUNT // 2, "rate": RATE, "table": str(table), "format": form}
    # Checkpoint 3 is recorded, its two subtasks' intervals never sent: the restart at
    # three subtasks must send each of them once, with no subtask of its own to match.
    harness.restart_at_three_after_a_driver_kill(
        entrypoint="table_jobs:running_sum", args=args,
        env={"CJOB_FAULTS_DIR": str(harness.base)})
    rows = table_rows(form, table)
    assert verify.verify(rows, count=COUNT // 2) == []
    assert len(rows) == COUNT // 2, "one row per record, none lost or repeated"
    assert ordered(spark_rows(lake_reader, form, table)) == ordered(rows)
