"""``cjob snapshot JOB --snapshot NAME``: a local job's checkpoint copied into a
snapshot that outlives the job's checkpoints, and what it says when it cannot."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from runtime_harness import write_completed_checkpoints

import cjob_checkpoint.snapshot as snapshot_module
from cjob.cli import main
from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata
from cjob_checkpoint.store.file import FileCheckpointStore, advance_attempt

JOB_ID = "sums-0a1b2c"


def local_job(state_dir: Path, ids: list[int]) -> CheckpointStorage:
    """A job ``sums`` as ``cjob run`` leaves it: its store and checkpoints."""
    directory = state_dir / "sums"
    advance_attempt(str(directory / "store"), 1)
    storage = CheckpointStorage((directory / "checkpoints").as_uri(), JOB_ID)
    store = FileCheckpointStore(str(directory / "store"), retained=3, attempt=1)
    write_completed_checkpoints(storage, store, ids, job=JOB_ID)
    return storage


def test_the_latest_checkpoint_becomes_a_snapshot_that_outlives_the_checkpoints(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local_job(tmp_path, [1, 2])
    assert main(["snapshot", "sums", "--snapshot", "v1", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    snapshot = tmp_path / "sums" / "snapshots" / "v1" / JOB_ID / "chk-2" / "_metadata"
    assert f"restore it with spec.restore.from: {snapshot.resolve().as_uri()}" in out
    shutil.rmtree(tmp_path / "sums" / "checkpoints")
    copy = CheckpointStorage((tmp_path / "sums" / "snapshots" / "v1").resolve().as_uri(), JOB_ID)
    metadata = CheckpointMetadata.from_bytes(copy.read_metadata(snapshot.resolve().as_uri()))
    assert metadata.checkpoint_id == 2
    assert metadata.snapshot is not None and metadata.snapshot.name == "v1"


@pytest.mark.parametrize(("args", "says"), [
    (["snapshot", "nobody", "--snapshot", "v1"], "no job 'nobody'"),
    (["snapshot", "sums", "--snapshot", "v1", "--checkpoint", "9"],
     "job 'sums' has no retained checkpoint 9"),
    (["snapshot", "sums", "--snapshot", "../up"], "snapshot name '../up'"),
])
def test_what_cannot_be_snapshotted_is_said_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str) -> None:
    local_job(tmp_path, [1])
    assert main([*args, "--state-dir", str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_a_snapshot_name_is_never_reused(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    local_job(tmp_path, [1])
    assert main(["snapshot", "sums", "--snapshot", "v1", "--state-dir", str(tmp_path)]) == 0
    assert main(["snapshot", "sums", "--snapshot", "v1", "--state-dir", str(tmp_path)]) == 1
    assert "snapshot 'v1' exists already" in capsys.readouterr().err


def test_checkpoints_the_running_job_completes_during_the_copy_never_prune_its_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    storage = local_job(tmp_path, [1, 2])
    store_dir = str(tmp_path / "sums" / "store")
    real_copy = snapshot_module.snapshot_checkpoint

    def copy_while_the_job_goes_on(**kwargs: Any) -> Any:
        # The job completes three checkpoints and keeps one: without the hold, chk-2
        # would be deleted before it is read.
        running = FileCheckpointStore(store_dir, retained=1, attempt=1)
        write_completed_checkpoints(storage, running, [3, 4, 5], job=JOB_ID)
        return real_copy(**kwargs)

    monkeypatch.setattr(snapshot_module, "snapshot_checkpoint", copy_while_the_job_goes_on)
    assert main(["snapshot", "sums", "--snapshot", "v1", "--state-dir", str(tmp_path)]) == 0
    assert "snapshot v1 of checkpoint 2" in capsys.readouterr().out
    assert not (tmp_path / "sums" / "store" / "holds").exists(), "let go after the copy"
    later = FileCheckpointStore(store_dir, retained=1, attempt=1)
    write_completed_checkpoints(storage, later, [6], job=JOB_ID)
    assert [c.checkpoint_id for c in later.all()] == [6], "and pruned like any other"
