"""The ``rocksdb`` backend's incremental checkpoints, against real RocksDB and real files.

A checkpoint here is what a job's would be: the backend's snapshot uploads itself
to file-system checkpoint storage, its ``_metadata`` is written, and its pointer
goes into a completed-checkpoint store whose pruning runs the shared-file cleaner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata, KeyedStateHandle
from cjob_checkpoint.shared_state import SharedStateRegistry
from cjob_checkpoint.storage.errors import CorruptDataError
from cjob_checkpoint.storage.local import local_path
from cjob_checkpoint.store.completed_store import CompletedCheckpoint
from cjob_checkpoint.store.memory import InMemoryCheckpointStore
from job_runtime.records import key_group_of
from job_runtime.state.backend import UploadedState
from job_runtime.state.rocksdb import RocksDBStateBackend
from job_runtime.state.rocksdb_format import RocksDBStateError, RocksDBStateFile

MAX_P = 128
KEYS = 40_000


def group(key: Any) -> int:
    return key_group_of(key, MAX_P)


class Job:
    """One subtask's backend, its checkpoint storage, store and cleaner."""

    def __init__(self, tmp_path: Path, *, job_id: str = "job-u1", retained: int = 2) -> None:
        self.tmp_path = tmp_path
        self.storage = CheckpointStorage(f"file://{tmp_path}/checkpoints", job_id)
        self.store = InMemoryCheckpointStore(retained=retained)
        self.cleaner = SharedStateRegistry(storage=self.storage)
        self.backend = self.new_backend()
        self.uploads: dict[int, UploadedState] = {}

    def new_backend(self, storage: CheckpointStorage | None = None) -> RocksDBStateBackend:
        return RocksDBStateBackend(key_groups=range(0, MAX_P), operator="count-1", subtask=0,
                                   local_dir=str(self.tmp_path / "local"),
                                   storage=storage or self.storage)

    def fill(self, keys: range, *, version: int = 0) -> None:
        for key in keys:
            self.backend.put("count", group(key), key, {"key": key, "v": version, "pad": "x" * 40})

    def upload(self, checkpoint_id: int) -> UploadedState:
        uploaded = self.backend.snapshot().upload(storage=self.storage,
                                                  checkpoint_id=checkpoint_id,
                                                  operator="count-1", subtask=0)
        self.uploads[checkpoint_id] = uploaded
        return uploaded

    def complete(self, checkpoint_id: int) -> UploadedState:
        """Upload, write ``_metadata``, commit and prune, then tell the backend."""
        uploaded = self.uploads.get(checkpoint_id) or self.upload(checkpoint_id)
        metadata = CheckpointMetadata(
            job=self.storage.job_id, checkpoint_id=checkpoint_id, timestamp=0.0, final=False,
            attempt=1, parallelism=1, max_parallelism=MAX_P,
            operators={"count-1": (KeyedStateHandle(subtask=0, handle=uploaded.handle,
                                                    key_groups=(0, MAX_P),
                                                    shared=uploaded.shared),)})
        path = self.storage.write_metadata(checkpoint_id, metadata.to_bytes())
        self.store.add_checkpoint_and_subsume_oldest(
            CompletedCheckpoint(checkpoint_id=checkpoint_id, metadata_path=path, timestamp=0.0),
            discard=self.cleaner.discard)
        self.cleaner.delete_unreferenced(self.store.all(), checkpoint_id=checkpoint_id)
        self.backend.notify_complete(checkpoint_id)
        return uploaded

    def shared_on_storage(self) -> set[str]:
        return set(self.storage.fs.list(self.storage.shared_dir))

    def referenced_by_retained(self) -> set[str]:
        refs: set[str] = set()
        for checkpoint in self.store.all():
            body = self.storage.read_metadata(checkpoint.metadata_path)
            refs |= CheckpointMetadata.from_bytes(body).shared_files()
        return refs


def uris(uploaded: UploadedState) -> set[str]:
    return {f.handle.uri for f in uploaded.shared}


def shared_bytes(uploaded: UploadedState, *, new_since: UploadedState | None = None) -> int:
    old = set() if new_since is None else uris(new_since)
    return sum(f.handle.size_bytes for f in uploaded.shared if f.handle.uri not in old)


@pytest.fixture
def job(tmp_path: Path) -> Any:
    made = Job(tmp_path)
    yield made
    made.backend.close()


class TestIncrementalCheckpoints:
    def test_after_changing_one_percent_of_the_keys_only_the_new_table_file_is_uploaded(
            self, job: Job) -> None:
        job.fill(range(KEYS))
        first = job.complete(1)
        job.fill(range(0, KEYS, 100), version=1)
        second = job.complete(2)

        new = uris(second) - uris(first)
        assert uris(first) <= uris(second)          # every earlier table file is reused
        assert len(new) == 1
        assert second.uploaded_bytes < first.uploaded_bytes / 20
        assert second.uploaded_bytes == (shared_bytes(second, new_since=first)
                                         + second.handle.size_bytes)
        assert job.shared_on_storage() == uris(second)

    def test_files_of_a_checkpoint_not_known_to_be_complete_are_uploaded_again(
            self, job: Job) -> None:
        job.fill(range(2000))
        first = job.upload(1)                      # never completes
        second = job.complete(2)
        assert not uris(first) & uris(second)
        assert {f.name for f in first.shared} <= {f.name for f in second.shared}

    def test_a_restored_backend_reuses_the_files_of_the_checkpoint_it_restored(
            self, job: Job) -> None:
        job.fill(range(5000))
        first = job.complete(1)
        restored = job.new_backend()
        try:
            assert restored.restore([job.storage.read_state(first.handle)]) == 5000
            assert restored.get("count", group(7), 7)["key"] == 7
            restored.put("count", group(7), 7, "changed")
            after = restored.snapshot().upload(storage=job.storage, checkpoint_id=2,
                                               operator="count-1", subtask=0)
            assert uris(first) <= uris(after)
            assert restored.last_restore is not None
            assert restored.last_restore.downloaded_files == len(first.shared)
        finally:
            restored.close()

    def test_another_jobs_files_are_restored_but_never_referenced_again(
            self, job: Job, tmp_path: Path) -> None:
        job.fill(range(3000))
        first = job.complete(1)
        other_storage = CheckpointStorage(f"file://{tmp_path}/checkpoints", "other-u2")
        other = job.new_backend(storage=other_storage)
        try:
            other.restore([job.storage.read_state(first.handle)])
            mine = other.snapshot().upload(storage=other_storage, checkpoint_id=1,
                                           operator="count-1", subtask=0)
            assert all(u.startswith(other_storage.shared_dir + "/") for u in uris(mine))
            assert other.get("count", group(5), 5)["key"] == 5
        finally:
            other.close()

    def test_a_damaged_shared_file_fails_the_restore_naming_it(self, job: Job) -> None:
        job.fill(range(1000))
        first = job.complete(1)
        damaged = first.shared[0].handle.uri
        with open(local_path(damaged), "r+b") as handle:
            handle.seek(100)
            handle.write(b"\x00\x01\x02")
        restored = job.new_backend()
        try:
            with pytest.raises(CorruptDataError, match="CRC-32"):
                restored.restore([job.storage.read_state(first.handle)])
        finally:
            restored.close()

    def test_a_state_file_of_no_backend_is_refused_with_a_sentence(self, job: Job) -> None:
        with pytest.raises(ValueError, match="not a keyed state file of a known version"):
            job.backend.restore([b"\x80\x05N."])      # a pickled None
        with pytest.raises(RocksDBStateError, match="version 9 is not supported"):
            job.backend.restore([b"cjob-rocksdb\n\x00\x00\x00\x0d{\"version\":9}"])

    def test_the_state_file_names_its_key_groups_private_and_shared_files(
            self, job: Job) -> None:
        job.fill(range(100))
        uploaded = job.complete(1)
        state = RocksDBStateFile.from_bytes(job.storage.read_state(uploaded.handle))
        assert state.key_groups == (0, MAX_P)
        assert "CURRENT" in state.private and any(n.startswith("MANIFEST-")
                                                  for n in state.private)
        assert state.shared == uploaded.shared


class TestSharedFileDeletion:
    def test_a_shared_file_lives_while_any_retained_checkpoint_references_it(
            self, job: Job) -> None:
        job.fill(range(KEYS))
        first = job.complete(1)
        for checkpoint_id in range(2, 6):
            job.fill(range(checkpoint_id, KEYS, 100), version=checkpoint_id)
            job.complete(checkpoint_id)
            # Pruned checkpoints 1, 2, 3 are gone, their reused table files are not.
            assert job.referenced_by_retained() <= job.shared_on_storage()
            assert uris(first) <= job.shared_on_storage()
        assert job.shared_on_storage() == job.referenced_by_retained()

    def test_files_no_retained_checkpoint_references_are_deleted_after_compaction(
            self, job: Job) -> None:
        job.fill(range(KEYS))
        first = job.complete(1)
        job.fill(range(0, KEYS, 100), version=1)
        job.complete(2)
        job.backend.compact()   # every old table file is rewritten
        job.complete(3)
        assert uris(first) <= job.shared_on_storage()    # checkpoint 2 still references them
        job.fill(range(1, KEYS, 100), version=2)
        job.complete(4)                                  # prunes 2: now nothing references them
        assert not uris(first) & job.shared_on_storage()
        assert job.shared_on_storage() == job.referenced_by_retained()

    def test_a_file_no_discarded_checkpoint_referenced_is_never_deleted(
            self, job: Job) -> None:
        job.fill(range(1000))
        in_flight = job.upload(7)       # uploaded for a checkpoint that has not completed
        for checkpoint_id in range(1, 5):
            job.fill(range(checkpoint_id, 1000, 50), version=checkpoint_id)
            job.complete(checkpoint_id)
        assert uris(in_flight) <= job.shared_on_storage()

    def test_nothing_is_deleted_while_a_retained_checkpoint_cannot_be_read(
            self, job: Job) -> None:
        job.fill(range(KEYS))
        first = job.complete(1)
        job.fill(range(0, KEYS, 100), version=1)
        job.backend.compact()    # rewrites the first checkpoint's files
        assert not uris(first) & uris(job.complete(2))
        newest = job.store.all()[-1]
        Path(local_path(newest.metadata_path)).write_bytes(b"damaged")
        job.cleaner = SharedStateRegistry(storage=job.storage)   # a new driver: nothing cached
        job.fill(range(5), version=3)
        job.complete(3)
        assert uris(first) <= job.shared_on_storage()

    def test_another_jobs_shared_files_are_never_deleted(self, tmp_path: Path) -> None:
        donor = Job(tmp_path, job_id="donor-u0")
        donor.fill(range(KEYS))
        given = donor.complete(1)
        job = Job(tmp_path)
        try:
            job.backend.restore([donor.storage.read_state(given.handle)])
            foreign = CheckpointMetadata(
                job="donor-u0", checkpoint_id=1, timestamp=0.0, final=False, attempt=1,
                parallelism=1, max_parallelism=MAX_P,
                operators={"count-1": (KeyedStateHandle(subtask=0, handle=given.handle,
                                                        key_groups=(0, MAX_P),
                                                        shared=given.shared),)})
            job.cleaner.discard(CompletedCheckpoint(
                checkpoint_id=1, metadata_path=donor.storage.metadata_uri(1), timestamp=0.0))
            job.cleaner.remember(1, foreign)
            assert job.cleaner.delete_unreferenced([], checkpoint_id=2) == []
            assert uris(given) <= donor.shared_on_storage()
        finally:
            donor.backend.close()
            job.backend.close()

    def test_a_checkpoint_referencing_a_deleted_file_is_reported_stale(
            self, job: Job) -> None:
        job.fill(range(KEYS))
        first = job.complete(1)
        job.fill(range(0, KEYS, 100), version=1)
        job.backend.compact()    # rewrites the first checkpoint's files
        assert not uris(first) & uris(job.complete(2))
        job.fill(range(3), version=3)
        job.complete(3)                          # prunes 1 and deletes its files
        late = CheckpointMetadata(
            job=job.storage.job_id, checkpoint_id=4, timestamp=0.0, final=False, attempt=1,
            parallelism=1, max_parallelism=MAX_P,
            operators={"count-1": (KeyedStateHandle(subtask=0, handle=first.handle,
                                                    key_groups=(0, MAX_P),
                                                    shared=first.shared),)})
        assert job.cleaner.stale(late) == sorted(uris(first))


def test_a_state_file_takes_its_shared_files_from_where_the_metadata_says_they_are() -> None:
    """A snapshot copies a checkpoint's shared files elsewhere and rewrites only the
    metadata: the restore follows the metadata, by file name."""
    from cjob_checkpoint.checkpoint_storage import StateHandle
    from cjob_checkpoint.metadata import SharedStateFile
    from job_runtime.state.rocksdb_format import RocksDBStateFile, with_shared_files

    old = SharedStateFile(name="000012.sst", handle=StateHandle(
        uri="s3://ckpt/job/shared/a-000012.sst", size_bytes=3, crc32=1))
    state = RocksDBStateFile(key_groups=(0, 64), private={"CURRENT": b"MANIFEST-1\n"},
                             shared=(old,))
    data = state.to_bytes()
    moved = SharedStateFile(name="000012.sst", handle=StateHandle(
        uri="s3://snapshots/v1/job/shared/a-000012.sst", size_bytes=3, crc32=1))
    relocated = RocksDBStateFile.from_bytes(with_shared_files(data, (moved,)))
    assert relocated.shared == (moved,)
    assert relocated.private == state.private and relocated.key_groups == (0, 64)
    assert with_shared_files(data, (old,)) is data
    assert with_shared_files(b"not rocksdb", (moved,)) == b"not rocksdb"
