"""The checkpoint layout: state files, ``_metadata`` last, ownership, discard."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest

from cjob_checkpoint.checkpoint_storage import (
    CheckpointLocation,
    CheckpointStorage,
    parse_checkpoint_uri,
    read_metadata,
    verify_metadata_readable,
)
from cjob_checkpoint.storage.errors import CorruptDataError, InvalidCheckpointPathError
from cjob_checkpoint.storage.local import LocalFileSystem
from cjob_checkpoint.store.completed_store import CompletedCheckpoint, UnreadableCheckpointError

JOB = "clicks-per-user-6f1c2a"


@pytest.fixture
def storage(tmp_path: Path) -> CheckpointStorage:
    return CheckpointStorage(f"file://{tmp_path}/ckpt", JOB, fs=LocalFileSystem())


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _complete(storage: CheckpointStorage, checkpoint_id: int) -> CompletedCheckpoint:
    storage.write_state(checkpoint_id, "reduce", 0, b"state-0")
    storage.write_state(checkpoint_id, "reduce", 1, b"state-1")
    path = storage.write_metadata(checkpoint_id, b'{"operators": ["reduce"]}')
    return CompletedCheckpoint(checkpoint_id=checkpoint_id, metadata_path=path,
                               timestamp=time.time())


class TestLayout:
    def test_state_and_metadata_follow_the_job_and_checkpoint_layout(
        self, storage: CheckpointStorage, tmp_path: Path
    ) -> None:
        handle = storage.write_state(7, "reduce", 3, b"abc")
        pointer = storage.write_metadata(7, b"meta")

        assert handle.uri == f"file://{tmp_path}/ckpt/{JOB}/chk-7/reduce/3"
        assert handle.size_bytes == 3
        assert pointer == f"file://{tmp_path}/ckpt/{JOB}/chk-7/_metadata"
        assert storage.checkpoint_dir(7) == f"file://{tmp_path}/ckpt/{JOB}/chk-7"
        assert _files(tmp_path / "ckpt") == [f"{JOB}/chk-7/_metadata", f"{JOB}/chk-7/reduce/3"]

    def test_a_checkpoint_without_metadata_is_not_complete(
        self, storage: CheckpointStorage
    ) -> None:
        storage.write_state(5, "reduce", 0, b"written before a crash")
        _complete(storage, 6)

        assert storage.list_completed_ids() == [6]
        with pytest.raises(UnreadableCheckpointError) as caught:
            storage.read_metadata(storage.metadata_uri(5))
        assert "does not exist" in str(caught.value)
        assert caught.value.checkpoint_id == 5

    def test_pending_data_of_an_aborted_checkpoint_can_be_removed(
        self, storage: CheckpointStorage, tmp_path: Path
    ) -> None:
        storage.write_state(5, "reduce", 0, b"partial")
        _complete(storage, 4)

        storage.discard_pending(5)

        assert all("chk-5" not in f for f in _files(tmp_path / "ckpt"))
        assert storage.list_completed_ids() == [4]

    @pytest.mark.parametrize("operator", ["../escape", "_metadata", "a/b", "", "x" * 201])
    def test_unsafe_operator_names_are_refused(
        self, storage: CheckpointStorage, operator: str
    ) -> None:
        with pytest.raises(InvalidCheckpointPathError):
            storage.write_state(1, operator, 0, b"x")

    def test_negative_ids_and_subtasks_are_refused(self, storage: CheckpointStorage) -> None:
        with pytest.raises(InvalidCheckpointPathError):
            storage.state_uri(-1, "op", 0)
        with pytest.raises(InvalidCheckpointPathError):
            storage.state_uri(1, "op", -2)

    def test_a_job_id_with_a_slash_is_refused(self, tmp_path: Path) -> None:
        with pytest.raises(InvalidCheckpointPathError):
            CheckpointStorage(str(tmp_path), "a/b")


class TestMetadata:
    def test_metadata_bytes_round_trip(self, storage: CheckpointStorage) -> None:
        pointer = storage.write_metadata(3, b"\x80binary\x00metadata")

        assert storage.read_metadata(pointer) == b"\x80binary\x00metadata"
        assert read_metadata(pointer) == b"\x80binary\x00metadata"
        assert storage.read_metadata(storage.checkpoint_dir(3)) == b"\x80binary\x00metadata"

    @pytest.mark.parametrize(
        ("damage", "expected"),
        [
            (lambda data: data[:-3], "truncated"),
            (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "checksum"),
            (lambda data: b"", "empty"),
            (lambda data: b'{"not": "ours"}', "header"),
        ],
    )
    def test_damaged_metadata_is_reported_as_unreadable_with_the_reason(
        self, storage: CheckpointStorage, tmp_path: Path, damage: object, expected: str
    ) -> None:
        pointer = storage.write_metadata(9, b"some metadata payload")
        path = tmp_path / "ckpt" / JOB / "chk-9" / "_metadata"
        path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]

        with pytest.raises(UnreadableCheckpointError) as caught:
            verify_metadata_readable(pointer)

        assert expected in caught.value.cause
        assert caught.value.checkpoint_id == 9
        assert caught.value.path == pointer

    def test_a_path_outside_the_layout_is_unreadable(self, tmp_path: Path) -> None:
        (tmp_path / "random.bin").write_bytes(b"x")

        with pytest.raises(UnreadableCheckpointError) as caught:
            read_metadata(str(tmp_path / "random.bin"))

        assert "chk-<id>" in caught.value.cause

    def test_streamed_state_gets_the_same_handle_as_whole_state(
        self, storage: CheckpointStorage
    ) -> None:
        whole = storage.write_state(1, "op", 0, b"abcdef" * 1000)
        streamed = storage.write_state_chunks(1, "op", 1, (b"abcdef" for _ in range(1000)))

        assert (streamed.size_bytes, streamed.crc32) == (whole.size_bytes, whole.crc32)
        assert storage.read_state(streamed) == b"abcdef" * 1000

    def test_state_is_checked_against_its_handle(
        self, storage: CheckpointStorage, tmp_path: Path
    ) -> None:
        handle = storage.write_state(2, "op", 0, b"exact bytes")
        assert storage.read_state(handle) == b"exact bytes"

        (tmp_path / "ckpt" / JOB / "chk-2" / "op" / "0").write_bytes(b"exact bytez")
        with pytest.raises(CorruptDataError):
            storage.read_state(handle)


class TestOwnership:
    def test_own_checkpoints_are_recognised_even_after_the_root_moved(
        self, storage: CheckpointStorage
    ) -> None:
        pointer = _complete(storage, 1).metadata_path

        assert storage.is_own_checkpoint(pointer)
        assert storage.is_own_checkpoint(f"s3://elsewhere/prefix/{JOB}/chk-1/_metadata")

    @pytest.mark.parametrize(
        "uri",
        [
            "file:///data/ckpt/clicks-per-user-99999/chk-1/_metadata",  # same name, other uid
            "file:///data/ckpt/other-job-6f1c2a/chk-1/_metadata",
            f"file:///data/ckpt/{JOB}/chk-x/_metadata",
            f"file:///data/ckpt/{JOB}/state.bin",
            "s3://bucket/chk-1/_metadata",
        ],
    )
    def test_another_jobs_or_a_malformed_path_is_not_own(
        self, storage: CheckpointStorage, uri: str
    ) -> None:
        assert not storage.is_own_checkpoint(uri)

    def test_a_metadata_uri_splits_into_root_job_and_id(self) -> None:
        assert parse_checkpoint_uri(f"s3://b/prefix/{JOB}/chk-42/_metadata") == CheckpointLocation(
            root="s3://b/prefix", job_id=JOB, checkpoint_id=42
        )
        location = parse_checkpoint_uri(f"/data/ckpt/{JOB}/chk-3/")
        assert (location.root, location.checkpoint_id) == ("/data/ckpt", 3)
        assert location.metadata_uri == f"/data/ckpt/{JOB}/chk-3/_metadata"
        with pytest.raises(InvalidCheckpointPathError):
            parse_checkpoint_uri(f"s3://{JOB}/chk-1/_metadata")


class TestDiscard:
    def test_discard_deletes_only_that_checkpoint(
        self, storage: CheckpointStorage, tmp_path: Path
    ) -> None:
        first = _complete(storage, 1)
        _complete(storage, 10)

        storage.discard(first)

        assert all("chk-1/" not in f for f in _files(tmp_path / "ckpt"))
        assert storage.list_completed_ids() == [10]

    def test_another_jobs_checkpoint_is_never_deleted(
        self, storage: CheckpointStorage, tmp_path: Path
    ) -> None:
        other = CheckpointStorage(f"file://{tmp_path}/ckpt", "clicks-per-user-99999")
        foreign = _complete(other, 1)

        storage.discard(foreign)

        assert other.list_completed_ids() == [1]

    def test_a_pointer_whose_id_disagrees_with_its_path_is_not_deleted(
        self, storage: CheckpointStorage
    ) -> None:
        real = _complete(storage, 2)
        wrong = CompletedCheckpoint(checkpoint_id=3, metadata_path=real.metadata_path,
                                    timestamp=real.timestamp)

        with pytest.raises(InvalidCheckpointPathError):
            storage.discard(wrong)
        assert storage.list_completed_ids() == [2]

    def test_storage_pickles_for_shipping_to_executors(self, storage: CheckpointStorage) -> None:
        copy = pickle.loads(pickle.dumps(storage))

        pointer = _complete(copy, 1).metadata_path
        assert storage.read_metadata(pointer) == b'{"operators": ["reduce"]}'
