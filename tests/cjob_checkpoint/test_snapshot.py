"""Snapshots: a completed checkpoint copied into a directory of its own, so that it
still restores after the job's checkpoints are pruned or deleted, whole or not at all.
"""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path

import pytest

from cjob_checkpoint.checkpoint_storage import CheckpointStorage, StateHandle
from cjob_checkpoint.metadata import (
    ChannelStateHandle,
    CheckpointMetadata,
    KeyedStateHandle,
    SharedStateFile,
)
from cjob_checkpoint.snapshot import snapshot_checkpoint
from cjob_checkpoint.storage.errors import CorruptDataError
from cjob_checkpoint.storage.local import LocalFileSystem

JOB = "sums-u1"
FS = LocalFileSystem()


def written_checkpoint(root: Path) -> tuple[CheckpointStorage, str]:
    """Checkpoint 7 of a job: two subtasks' state, one shared file both reference, one
    file of another job it was restored from, and in-flight data."""
    storage = CheckpointStorage(root.as_uri(), JOB, fs=FS)
    low = storage.write_state(7, "total", 0, b"low keys" * 100)
    high = storage.write_state(7, "total", 1, b"high keys" * 100)
    shared_uri = storage.shared_uri("7-0-000012.sst")
    FS.write_bytes(shared_uri, b"sst" * 1000)
    shared = SharedStateFile(name="000012.sst", handle=StateHandle(
        uri=shared_uri, size_bytes=3000, crc32=zlib.crc32(b"sst" * 1000)))
    other = CheckpointStorage(root.as_uri(), "sums-u0", fs=FS)
    old_uri = other.shared_uri("3-0-000007.sst")
    FS.write_bytes(old_uri, b"old" * 10)
    imported = SharedStateFile(name="000007.sst", handle=StateHandle(
        uri=old_uri, size_bytes=30, crc32=zlib.crc32(b"old" * 10)))
    channels = storage.write_state(7, "stage-1-channels", 0, b"in flight")
    metadata = CheckpointMetadata(
        job=JOB, checkpoint_id=7, timestamp=1.0, final=False, attempt=2, parallelism=2,
        max_parallelism=128, sources={0: 41},
        operators={"total": (
            KeyedStateHandle(subtask=0, handle=low, key_groups=(0, 64), shared=(shared,)),
            KeyedStateHandle(subtask=1, handle=high, key_groups=(64, 128),
                             shared=(shared, imported)))},
        channels={1: (ChannelStateHandle(subtask=0, handle=channels),)})
    return storage, storage.write_metadata(7, metadata.to_bytes())


def every_handle(metadata: CheckpointMetadata) -> list[StateHandle]:
    found = []
    for handles in metadata.operators.values():
        for handle in handles:
            found.append(handle.handle)
            found.extend(f.handle for f in handle.shared)
    found.extend(h.handle for handles in metadata.channels.values() for h in handles)
    return found


def test_a_snapshot_reads_whole_after_the_jobs_checkpoints_are_deleted(tmp_path: Path) -> None:
    _, checkpoint = written_checkpoint(tmp_path / "ckpt")
    snapshot = snapshot_checkpoint(checkpoint=checkpoint, target=(tmp_path / "snap").as_uri(),
                                   name="before-upgrade", source_fs=FS, target_fs=FS, clock=5.0)
    shutil.rmtree(tmp_path / "ckpt")

    assert snapshot.metadata_uri == (tmp_path / "snap" / JOB / "chk-7" / "_metadata").as_uri()
    copy = CheckpointStorage((tmp_path / "snap").as_uri(), JOB, fs=FS)
    metadata = CheckpointMetadata.from_bytes(copy.read_metadata(snapshot.metadata_uri))
    assert metadata.snapshot is not None
    assert (metadata.snapshot.name, metadata.snapshot.source) == ("before-upgrade", checkpoint)
    assert metadata.sources == {0: 41} and metadata.checkpoint_id == 7
    handles = every_handle(metadata)
    assert all(h.uri.startswith((tmp_path / "snap").as_uri() + "/") for h in handles)
    for handle in handles:
        copy.read_state(handle)  # size and CRC-32 checked
    # A file both subtasks reference is copied once; another job's lies apart.
    shared = {f.handle.uri for h in metadata.operators["total"] for f in h.shared}
    assert len(shared) == 2
    assert any("/shared/imported/" in uri for uri in shared)
    assert snapshot.files == 6  # two state files, two shared, in-flight data, _metadata


def test_a_damaged_state_file_leaves_no_snapshot_behind(tmp_path: Path) -> None:
    storage, checkpoint = written_checkpoint(tmp_path / "ckpt")
    damaged = Path(storage.state_uri(7, "total", 1).removeprefix("file://"))
    damaged.write_bytes(b"HIGH KEYS" * 100)
    with pytest.raises(CorruptDataError, match="CRC-32"):
        snapshot_checkpoint(checkpoint=checkpoint, target=(tmp_path / "snap").as_uri(),
                            name="broken", source_fs=FS, target_fs=FS)
    assert not (tmp_path / "snap" / JOB / "chk-7" / "_metadata").exists()
