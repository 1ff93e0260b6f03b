"""The Delta sink on real Spark: the running sum written into a Delta table through a
subtask kill, a crash between the table's commit and the checkpoint store's, and driver
kills; the table read back with ``deltalake`` holds every row exactly once, and a merge
table ends with every key's final sum."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from deltalake import DeltaTable
from runtime_harness import JOBS, EmbeddedRun, load_example

COUNT = 6000
RATE = 1000
KEYS = 97

verify = load_example("examples/running_sum/verify.py")


def test_every_row_lands_once_through_crashes_at_each_commit_step(
        tmp_path: Path, embedded: Callable[..., EmbeddedRun],
        job_yaml: Callable[..., Path]) -> None:
    table = tmp_path / "sums"
    job = job_yaml(tmp_path / "job.yaml", name="deltasums",
                   entrypoint="delta_jobs:running_sum", python_path=[str(JOBS)],
                   args={"count": COUNT, "rate": RATE, "table": str(table),
                         "crash_at": 1500, "crash_marker": str(tmp_path / "crashed")})
    # After the table's commit, before anything else knew (the restore must see the
    # table's transaction version and not send again); and a driver whose checkpoint
    # was recorded but whose sinks were never told (the restore must send it).
    faults = "subtask.write-ahead-after-send@3,driver.before-notify@5"
    run = embedded(job, state_dir=tmp_path / "state", name="deltasums",
                   env={"CJOB_FAULTS": faults, "CJOB_FAULTS_DIR": str(tmp_path)})
    assert run.returncode == 0, run.explain()
    assert run.status["phase"] == "Succeeded", run.status
    assert (tmp_path / "crashed").exists(), "the subtask never reached its kill"
    assert len(list(tmp_path.glob(".cjob-fault-*"))) == 2, "not every fault point fired"

    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    assert verify.verify(rows, count=COUNT) == []
    assert len(rows) == COUNT, "one row per record, none lost or repeated"


def test_a_merge_table_ends_with_every_keys_final_sum(
        tmp_path: Path, embedded: Callable[..., EmbeddedRun],
        job_yaml: Callable[..., Path]) -> None:
    table = tmp_path / "latest"
    job = job_yaml(tmp_path / "job.yaml", name="deltalatest",
                   entrypoint="delta_jobs:running_sum", python_path=[str(JOBS)],
                   args={"count": COUNT, "rate": RATE * 3, "table": str(table),
                         "mode": "merge"})
    run = embedded(job, state_dir=tmp_path / "state", name="deltalatest",
                   env={"CJOB_FAULTS": "driver.before-notify@3",
                        "CJOB_FAULTS_DIR": str(tmp_path)})
    assert run.returncode == 0, run.explain()
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    final = {row["key"]: row["value"] for row in rows}
    assert len(rows) == len(final) == KEYS, "one row per key"
    expected = {key: sum(range(key, COUNT, KEYS)) for key in range(KEYS)}
    assert final == expected
