"""A snapshot pod's commands, run as the pod runs them (``python -m job_runtime``'s main):
what they copy or delete, what they refuse before touching storage, and the outcome
the operator reads from the termination message."""

from __future__ import annotations

from pathlib import Path

import pytest

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata, KeyedStateHandle
from cjob_checkpoint.storage.local import LocalFileSystem
from cjob_spec.exit_codes import ExitCode
from cjob_spec.names import snapshot_directory
from cjob_spec.snapshot_outcome import SnapshotOutcome, SnapshotTask
from job_runtime.cli import main

FS = LocalFileSystem()
JOB = "sums-u1"


def checkpoint(root: Path, checkpoint_id: int = 4) -> str:
    storage = CheckpointStorage(root.as_uri(), JOB, fs=FS)
    handle = storage.write_state(checkpoint_id, "total", 0, b"state" * 50)
    metadata = CheckpointMetadata(
        job=JOB, checkpoint_id=checkpoint_id, timestamp=1.0, final=False, attempt=1,
        parallelism=1, max_parallelism=8, sources={0: 9},
        operators={"total": (KeyedStateHandle(subtask=0, handle=handle, key_groups=(0, 8)),)})
    return storage.write_metadata(checkpoint_id, metadata.to_bytes())


def run(args: list[str], log: Path) -> tuple[int, SnapshotOutcome]:
    log.write_text("")  # the kubelet creates the file; the command only writes into it
    code = main([*args, "--termination-log", str(log)])
    return code, SnapshotOutcome.from_message(log.read_text())


def test_take_snapshot_copies_the_checkpoint_and_reports_it(tmp_path: Path) -> None:
    source = checkpoint(tmp_path / "checkpoints")
    target = snapshot_directory((tmp_path / "checkpoints").as_uri(), snapshot_name="keep",
                                snapshot_uid="s1")
    code, outcome = run(["take-snapshot", "--checkpoint", source, "--target", target,
                         "--snapshot-name", "keep", "--snapshot-uid", "s1"], tmp_path / "log")
    assert code == ExitCode.FINISHED
    assert outcome.task is SnapshotTask.TAKE and outcome.succeeded
    assert outcome.checkpoint_id == 4
    assert outcome.path == f"{target}/{JOB}/chk-4/_metadata"
    assert outcome.files == 2 and outcome.size_bytes > 250
    copied = CheckpointMetadata.from_bytes(
        CheckpointStorage(target, JOB, fs=FS).read_metadata(outcome.path))
    assert copied.snapshot is not None and copied.snapshot.name == "keep"
    assert all(h.handle.uri.startswith(target) for h in copied.operators["total"])


def test_a_pruned_checkpoint_is_a_failure_that_names_it(tmp_path: Path) -> None:
    root = (tmp_path / "checkpoints").as_uri()
    target = snapshot_directory(root, snapshot_name="keep", snapshot_uid="s1")
    missing = f"{root}/{JOB}/chk-9/_metadata"
    code, outcome = run(["take-snapshot", "--checkpoint", missing, "--target", target,
                         "--snapshot-name", "keep", "--snapshot-uid", "s1"], tmp_path / "log")
    assert code == ExitCode.RESTORE_FAILED
    assert outcome.error is not None and "chk-9" in outcome.error
    assert not (tmp_path / "checkpoints" / "snapshots").exists()


@pytest.mark.parametrize("target", [
    "{root}/snapshots/other-s1",      # another snapshot's directory
    "{root}/sums-u1",                 # the job's checkpoint directory
    "{root}/keep-s1",                 # not below snapshots/
    "{root}/snapshots/../keep-s1",
])
def test_a_directory_that_is_not_the_snapshots_own_is_refused_untouched(
        tmp_path: Path, target: str) -> None:
    root = (tmp_path / "checkpoints").as_uri()
    source = checkpoint(tmp_path / "checkpoints")
    before = sorted(p for p in (tmp_path / "checkpoints").rglob("*"))
    for command in (["take-snapshot", "--checkpoint", source], ["dispose-snapshot"]):
        code, outcome = run([*command, "--target", target.format(root=root),
                             "--snapshot-name", "keep", "--snapshot-uid", "s1"],
                            tmp_path / "log")
        assert code == ExitCode.BAD_CONFIG
        assert outcome.error is not None and "refusing" in outcome.error
    assert sorted(p for p in (tmp_path / "checkpoints").rglob("*")) == before


def test_dispose_deletes_the_snapshot_and_leaves_the_jobs_checkpoints(tmp_path: Path) -> None:
    root = (tmp_path / "checkpoints").as_uri()
    source = checkpoint(tmp_path / "checkpoints")
    target = snapshot_directory(root, snapshot_name="keep", snapshot_uid="s1")
    names = ["--target", target, "--snapshot-name", "keep", "--snapshot-uid", "s1"]
    assert run(["take-snapshot", "--checkpoint", source, *names], tmp_path / "log")[0] == 0
    code, outcome = run(["dispose-snapshot", *names], tmp_path / "log")
    assert code == ExitCode.FINISHED and outcome.task is SnapshotTask.DISPOSE
    assert outcome.files == 2
    assert not any(p.is_file() for p in (tmp_path / "checkpoints" / "snapshots").rglob("*"))
    assert (tmp_path / "checkpoints" / JOB / "chk-4" / "_metadata").is_file()
    again = run(["dispose-snapshot", *names], tmp_path / "log")
    assert again[0] == ExitCode.FINISHED, "disposing twice is harmless"
