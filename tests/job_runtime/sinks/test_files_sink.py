"""The files sink's two-phase commit: what readers see, and when.

Readers see the files under the sink's path whose names do not start with ``.``
or ``_``. Those must hold exactly the records of completed checkpoints, however
often commits are repeated, fail or are interrupted by a restore.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from job_runtime.records import Batch
from job_runtime.sinks import files
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter


def open_writer(path: Path | str, *, subtask: int = 0, attempt: str = "a1e1",
                fmt: str = "jsonl", s3: Any = None) -> SinkWriter:
    return files(str(path), format=fmt).open(context=SinkContext(
        subtask=subtask, parallelism=2, attempt_tag=attempt, s3=s3))


def visible_records(path: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    if not path.exists():
        return records
    for f in sorted(path.iterdir()):
        if f.name.startswith((".", "_")) or not f.is_file():
            continue
        if f.suffix == ".parquet":
            records.extend(pq.read_table(f).to_pylist())
        else:
            records.extend(json.loads(line) for line in f.read_text().splitlines() if line)
    return records


def rows(*values: int) -> Batch:
    return Batch(rows=[{"n": v} for v in values])


def numbers(path: Path) -> list[int]:
    return sorted(r["n"] for r in visible_records(path))


def test_written_records_stay_invisible_until_their_checkpoint_completes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer = open_writer(out)
    writer.write(rows(1, 2))
    assert numbers(out) == []
    writer.snapshot(1)                     # pre-commit: staged, still invisible
    writer.write(rows(3))
    assert numbers(out) == []
    writer.notify_complete(1)
    assert numbers(out) == [1, 2]          # record 3 belongs to the next checkpoint
    writer.snapshot(2)
    assert numbers(out) == [1, 2]
    writer.notify_complete(2)
    assert numbers(out) == [1, 2, 3]


def test_a_completion_commits_every_earlier_pending_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer = open_writer(out)
    writer.write(rows(1))
    writer.snapshot(1)
    writer.write(rows(2))
    writer.snapshot(2)                     # checkpoint 1's completion was never announced
    writer.write(rows(3))
    writer.snapshot(3)
    writer.notify_complete(2)
    assert numbers(out) == [1, 2]
    writer.notify_complete(3)
    assert numbers(out) == [1, 2, 3]


def test_commits_are_idempotent(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer = open_writer(out)
    writer.write(rows(1, 2))
    state = writer.snapshot(1)
    writer.notify_complete(1)
    writer.notify_complete(1)
    # A restore of the same checkpoint commits its pending transactions again.
    again = open_writer(out, attempt="a2e1")
    again.restore([state])
    again.restore([state])
    assert numbers(out) == [1, 2]


def test_a_failed_commit_is_retried_on_the_next_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer = open_writer(out)
    writer.write(rows(1))
    writer.snapshot(1)
    # Something occupies the final name: the rename fails (a real OS error).
    blocker = out / "part-0000000001-00000.jsonl"
    blocker.mkdir(parents=True)
    (blocker / "keep").write_text("x")
    writer.notify_complete(1)              # logged, not raised: the task goes on
    writer.write(rows(2))
    writer.snapshot(2)
    assert numbers(out) == []
    (blocker / "keep").unlink()
    blocker.rmdir()
    writer.notify_complete(2)
    assert numbers(out) == [1, 2]


def test_a_restore_commits_the_pending_transactions_of_the_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "out"
    crashed = open_writer(out, attempt="a1e1")
    crashed.write(rows(1, 2))
    crashed.snapshot(1)
    crashed.notify_complete(1)
    crashed.write(rows(3))
    state = crashed.snapshot(2)            # checkpoint 2 completes in the coordinator ...
    crashed.write(rows(4))
    crashed.snapshot(3)                    # ... but 3 never does, and the subtask dies
    assert numbers(out) == [1, 2]

    restored = open_writer(out, attempt="a2e1")
    restored.restore([state])
    assert numbers(out) == [1, 2, 3]       # 4 was only in checkpoint 3: never visible
    restored.write(rows(4))
    restored.snapshot(3)
    restored.notify_complete(3)
    assert numbers(out) == [1, 2, 3, 4]


def test_a_restore_of_an_older_checkpoint_never_shows_newer_uncommitted_data(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    crashed = open_writer(out)
    crashed.write(rows(1))
    state = crashed.snapshot(1)
    crashed.write(rows(2))
    crashed.snapshot(2)
    restored = open_writer(out, attempt="a1e2")
    restored.restore([state])
    assert numbers(out) == [1]
    staged = [p.name for p in (out / "_pending").iterdir()]
    assert staged and all(name.endswith(".inprogress") for name in staged)


def test_restoring_an_older_checkpoint_withdraws_output_committed_after_it(
        tmp_path: Path) -> None:
    """A fallback past a damaged checkpoint replays its records: their files must go."""
    out = tmp_path / "out"
    sink = files(str(out))
    writers = [open_writer(out, subtask=i) for i in range(2)]
    states = {}
    for checkpoint_id in (1, 2, 3):
        for i, writer in enumerate(writers):
            writer.write(rows(checkpoint_id * 10 + i))
            states[checkpoint_id, i] = writer.snapshot(checkpoint_id)
            writer.notify_complete(checkpoint_id)
    (out / "_pending" / "part-0000000004-00000-a1e1.jsonl.inprogress").write_text("{}\n")
    (out / "notes.txt").write_text('{"note": "not ours"}\n')

    sink.prepare_restore(checkpoint_id=2)
    remaining = sorted(p.name for p in out.iterdir() if p.is_file())
    assert remaining == ["notes.txt", "part-0000000001-00000.jsonl",
                         "part-0000000001-00001.jsonl", "part-0000000002-00000.jsonl",
                         "part-0000000002-00001.jsonl"]
    assert (out / "_pending" / "part-0000000004-00000-a1e1.jsonl.inprogress").exists()

    # The restored subtask produces checkpoint 3's records again, once.
    restored = open_writer(out, attempt="a2e1")
    restored.restore([states[2, 0], states[2, 1]])
    restored.write(rows(30, 31))
    restored.snapshot(5)
    restored.notify_complete(5)
    assert sorted(r["n"] for r in visible_records(out) if "n" in r) == [10, 11, 20, 21, 30, 31]


def test_subtasks_write_separate_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writers = [open_writer(out, subtask=i) for i in range(2)]
    for i, writer in enumerate(writers):
        writer.write(rows(i))
        writer.snapshot(1)
        writer.notify_complete(1)
    assert numbers(out) == [0, 1]
    assert len([p for p in out.iterdir() if p.is_file()]) == 2


def test_parquet_output_is_committed_the_same_way(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer = open_writer(out, fmt="parquet")
    writer.write(Batch(arrow=pa.RecordBatch.from_pydict({"n": [5, 6]})))
    writer.snapshot(1)
    assert numbers(out) == []
    writer.notify_complete(1)
    assert numbers(out) == [5, 6]


def test_finishing_the_job_removes_staging_leftovers(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = files(str(out))
    writer = open_writer(out)
    writer.write(rows(1))
    writer.snapshot(1)
    writer.write(rows(2))
    writer.snapshot(2)                     # never completes
    writer.notify_complete(1)
    sink.finish_job()
    assert not (out / "_pending").exists()
    assert numbers(out) == [1]


def test_a_commit_failing_on_an_s3_outage_is_retried_after_it(s3_faults: Any) -> None:
    client = s3_faults.bucket.client
    prefix = "out"
    path = f"{s3_faults.uri}/{prefix}"

    def visible() -> list[int]:
        listed = client.list_objects_v2(Bucket=s3_faults.bucket.bucket, Prefix=f"{prefix}/")
        found: list[int] = []
        for item in listed.get("Contents", []):
            name = item["Key"][len(prefix) + 1:]
            if "/" in name or name.startswith((".", "_")):
                continue
            body = client.get_object(Bucket=s3_faults.bucket.bucket, Key=item["Key"])["Body"]
            found.extend(json.loads(line)["n"] for line in body.read().decode().splitlines())
        return sorted(found)

    writer = open_writer(path, s3=s3_faults.s3_config)
    writer.write(rows(1, 2))
    writer.snapshot(1)
    s3_faults.proxy.fail_with(503, "ServiceUnavailable")
    writer.notify_complete(1)              # the outage: the commit fails and stays pending
    s3_faults.proxy.pass_through()
    assert visible() == []
    writer.write(rows(3))
    writer.snapshot(2)
    writer.notify_complete(2)
    assert visible() == [1, 2, 3]
