"""Incremental ``rocksdb`` checkpoints on the S3 API (moto's server): upload, restore,
and deletion of shared objects no retained checkpoint references."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata, KeyedStateHandle
from cjob_checkpoint.shared_state import SharedStateRegistry
from cjob_checkpoint.storage.s3 import S3FileSystem
from cjob_checkpoint.store.completed_store import CompletedCheckpoint
from cjob_checkpoint.store.memory import InMemoryCheckpointStore
from e2e.s3 import S3Bucket
from job_runtime.records import key_group_of
from job_runtime.state.backend import UploadedState
from job_runtime.state.rocksdb import RocksDBStateBackend

MAX_P = 128


def group(key: Any) -> int:
    return key_group_of(key, MAX_P)


def backend(tmp_path: Path, storage: CheckpointStorage, key_groups: range = range(0, MAX_P),
            subtask: int = 0) -> RocksDBStateBackend:
    return RocksDBStateBackend(key_groups=key_groups, operator="count-1", subtask=subtask,
                               local_dir=str(tmp_path / "local"), storage=storage)


def commit(storage: CheckpointStorage, store: InMemoryCheckpointStore,
           cleaner: SharedStateRegistry, checkpoint_id: int, uploaded: UploadedState) -> None:
    metadata = CheckpointMetadata(
        job=storage.job_id, checkpoint_id=checkpoint_id, timestamp=0.0, final=False, attempt=1,
        parallelism=1, max_parallelism=MAX_P,
        operators={"count-1": (KeyedStateHandle(subtask=0, handle=uploaded.handle,
                                                key_groups=(0, MAX_P), shared=uploaded.shared),)})
    path = storage.write_metadata(checkpoint_id, metadata.to_bytes())
    store.add_checkpoint_and_subsume_oldest(
        CompletedCheckpoint(checkpoint_id=checkpoint_id, metadata_path=path, timestamp=0.0),
        discard=cleaner.discard)
    cleaner.delete_unreferenced(store.all(), checkpoint_id=checkpoint_id)


def test_incremental_checkpoints_restore_and_clean_up_on_s3(
        tmp_path: Path, s3_bucket: S3Bucket) -> None:
    storage = CheckpointStorage(f"{s3_bucket.uri}/ckpt", "job-u1",
                                fs=S3FileSystem(config=s3_bucket.s3_config))
    store = InMemoryCheckpointStore(retained=1)
    cleaner = SharedStateRegistry(storage=storage)
    db = backend(tmp_path, storage)
    try:
        for key in range(20_000):
            db.put("count", group(key), key, {"key": key, "pad": "x" * 40})
        first = db.snapshot().upload(storage=storage, checkpoint_id=1, operator="count-1",
                                     subtask=0)
        commit(storage, store, cleaner, 1, first)
        db.notify_complete(1)
        for key in range(0, 20_000, 100):
            db.put("count", group(key), key, "changed")
        db.compact()                               # the first checkpoint's files go
        second = db.snapshot().upload(storage=storage, checkpoint_id=2, operator="count-1",
                                      subtask=0)
        commit(storage, store, cleaner, 2, second)
        on_s3 = set(storage.fs.list(storage.shared_dir))
        assert on_s3 == {f.handle.uri for f in second.shared}

        blob = storage.read_state(second.handle)
        whole = backend(tmp_path, storage)
        halves = [backend(tmp_path, storage, range(0, 64), 0),
                  backend(tmp_path, storage, range(64, 128), 1)]
        try:
            whole.restore([blob])
            assert whole.get("count", group(100), 100) == "changed"
            assert whole.get("count", group(101), 101)["key"] == 101
            assert sum(h.restore([blob]) for h in halves) == 20_000
        finally:
            for restored in (whole, *halves):
                restored.close()
    finally:
        db.close()
