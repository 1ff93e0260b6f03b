"""Two jobs that write one output path, or a job deleted and created again (a new
uid), never touch each other's files: the part and staging names carry the job's
identity, and restore and clean-up act on their own job's names only."""

from __future__ import annotations

import json
from pathlib import Path

from job_runtime.records import Batch
from job_runtime.sinks import files
from job_runtime.sinks.files_sink import output_tag
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter


def numbers(path: Path) -> list[int]:
    """The records readers see: every file whose name does not start with ``.``/``_``."""
    found: list[int] = []
    for f in sorted(path.iterdir()):
        if f.is_file() and not f.name.startswith((".", "_")):
            found.extend(json.loads(line)["n"] for line in f.read_text().splitlines() if line)
    return sorted(found)

JOB_A = "clicks-0b7e0d3c-5c1f-4c8e-9d1e-000000000001"
JOB_B = "clicks-0b7e0d3c-5c1f-4c8e-9d1e-000000000002"  # the same name, recreated


def writer_for(path: Path, job_id: str, *, subtask: int = 0) -> SinkWriter:
    return files(str(path)).open(context=SinkContext(
        subtask=subtask, parallelism=1, attempt_tag="a1e1", job_id=job_id))


def commit(writer: SinkWriter, checkpoint_id: int, *values: int) -> None:
    writer.write(Batch(rows=[{"n": v} for v in values]))
    writer.snapshot(checkpoint_id)
    writer.notify_complete(checkpoint_id)


def test_two_jobs_committing_the_same_checkpoint_ids_keep_both_outputs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    commit(writer_for(out, JOB_A), 1, 1, 2)
    commit(writer_for(out, JOB_B), 1, 3)
    assert numbers(out) == [1, 2, 3]


def test_the_output_tag_differs_between_a_job_and_its_recreation() -> None:
    assert output_tag(JOB_A) != output_tag(JOB_B)
    assert output_tag(JOB_A) == output_tag(JOB_A)


def test_a_restore_withdraws_only_its_own_jobs_newer_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    a, b = writer_for(out, JOB_A), writer_for(out, JOB_B)
    for checkpoint_id in (1, 2, 3):
        commit(a, checkpoint_id, checkpoint_id)
        commit(b, checkpoint_id, 100 + checkpoint_id)
    files(str(out)).prepare_restore(checkpoint_id=1, job_id=JOB_B)
    assert numbers(out) == [1, 2, 3, 101]


def test_finishing_a_job_leaves_another_jobs_pending_data(tmp_path: Path) -> None:
    out = tmp_path / "out"
    a, b = writer_for(out, JOB_A), writer_for(out, JOB_B)
    a.write(Batch(rows=[{"n": 7}]))
    a.snapshot(1)                          # job A's checkpoint 1 is still pending
    commit(b, 1, 8)
    files(str(out)).finish_job(job_id=JOB_B)
    a.notify_complete(1)                   # A's staged data survived B's clean-up
    assert numbers(out) == [7, 8]
