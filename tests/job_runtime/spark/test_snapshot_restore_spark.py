"""A snapshot outlives the job it was taken of, on real Spark with RocksDB state.

Job A (incremental RocksDB checkpoints, whose state files share table files) is
killed; checkpoint 3 is copied into a snapshot; A's checkpoint directory is deleted.
Job B, a new job with its own store, names the snapshot in ``--restore`` (no
``allowForeignJob``: a snapshot is an explicit choice), continues A's state, withdraws
A's output newer than checkpoint 3, and every running sum is written exactly once.
B never writes into the snapshot or builds its checkpoints on the snapshot's files.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from runtime_harness import JobHarness

from cjob_checkpoint.checkpoint_storage import unframe_metadata
from cjob_checkpoint.metadata import CheckpointMetadata
from cjob_checkpoint.snapshot import snapshot_checkpoint
from cjob_checkpoint.storage.local import LocalFileSystem

COUNT = 8000
RATE = 1000
ROCKSDB = ["--state-backend", "rocksdb"]


def files_below(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.stat().st_mtime_ns
            for p in directory.rglob("*") if p.is_file()}


def test_a_new_job_continues_a_snapshot_after_the_first_jobs_checkpoints_are_deleted(
        tmp_path: Path, new_harness: Callable[[Path], JobHarness]) -> None:
    first = new_harness(tmp_path)
    args = {"count": COUNT, "rate": RATE, "output": str(first.output)}
    run = first.run(entrypoint="crashing_jobs:running_sum", attempt=1, args=args, extra=ROCKSDB,
                    env={"CJOB_FAULTS": "driver.before-metadata@4"})
    assert run.returncode == -9, run.explain()
    job_dir = first.checkpoints / f"{first.name}-{first.uid}"
    snapshots = tmp_path / "snapshots" / "before-upgrade"
    taken = snapshot_checkpoint(checkpoint=(job_dir / "chk-3" / "_metadata").as_uri(),
                                target=snapshots.as_uri(), name="before-upgrade",
                                source_fs=LocalFileSystem(), target_fs=LocalFileSystem())
    shared = [f for handles in taken.metadata.operators.values() for h in handles
              for f in h.shared]
    assert shared, "RocksDB checkpoints share table files: the test needs some"
    shutil.rmtree(job_dir)
    before = files_below(snapshots)

    second = new_harness(tmp_path)
    second.store = tmp_path / "store-of-the-new-job"
    assert second.uid != first.uid
    run = second.run(entrypoint="crashing_jobs:running_sum", attempt=1, args=args,
                     extra=[*ROCKSDB, "--restore", taken.metadata_uri])
    assert run.returncode == 0, run.explain()
    assert run.status is not None and run.status["restoredFrom"]["id"] == 3
    assert "restoring snapshot 'before-upgrade'" in run.output
    assert second.running_sum_problems(count=COUNT) == []

    assert files_below(snapshots) == before, "the new job wrote into the snapshot"
    own = second.checkpoints / f"{second.name}-{second.uid}"
    for metadata_path in own.glob("chk-*/_metadata"):
        text = metadata_path.read_text()
        assert snapshots.as_uri() not in text, f"{metadata_path} builds on the snapshot's files"
    latest = max(own.glob("chk-*/_metadata"), key=lambda p: int(p.parent.name[4:]))
    metadata = CheckpointMetadata.from_bytes(unframe_metadata(latest.read_bytes()))
    assert metadata.operators, "the new job's state is not its own"
