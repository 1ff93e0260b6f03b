"""The local file system: atomic writes, listing, deletion, rename and errors."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from cjob_checkpoint.storage.errors import (
    StorageError,
    StorageNotFoundError,
    UnsupportedUriError,
)
from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.local import LocalFileSystem
from cjob_checkpoint.storage.s3 import S3FileSystem


@pytest.fixture
def fs() -> LocalFileSystem:
    return LocalFileSystem()


def _visible_files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


class TestRoundTrips:
    def test_bytes_written_to_a_file_uri_are_read_back_from_the_plain_path(
        self, fs: LocalFileSystem, tmp_path: Path
    ) -> None:
        fs.write_bytes(f"file://{tmp_path}/a/b/data.bin", b"\x00payload\xff")

        assert fs.read_bytes(str(tmp_path / "a" / "b" / "data.bin")) == b"\x00payload\xff"
        assert fs.size(f"file://{tmp_path}/a/b/data.bin") == 9
        assert fs.exists(f"file://{tmp_path}/a/b/data.bin")

    def test_relative_paths_are_resolved_against_the_current_directory(
        self, fs: LocalFileSystem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        fs.write_bytes("rel/x.txt", b"x")

        assert (tmp_path / "rel" / "x.txt").read_bytes() == b"x"
        assert fs.list("rel") == ["rel/x.txt"]

    def test_a_streamed_write_appears_complete_after_the_block(
        self, fs: LocalFileSystem, tmp_path: Path
    ) -> None:
        target = tmp_path / "out" / "part-0.jsonl"
        with fs.open_write(str(target)) as handle:
            handle.write(b'{"a": 1}\n')
            handle.write(b'{"a": 2}\n')
            assert not target.exists()

        assert target.read_bytes() == b'{"a": 1}\n{"a": 2}\n'
        assert _visible_files(tmp_path) == ["out/part-0.jsonl"]

    def test_open_read_gives_a_seekable_stream(self, fs: LocalFileSystem, tmp_path: Path) -> None:
        fs.write_bytes(str(tmp_path / "f"), b"0123456789")

        with fs.open_read(str(tmp_path / "f")) as handle:
            handle.seek(4)
            assert handle.read(3) == b"456"


class TestAtomicWrites:
    def test_an_overwrite_shows_the_old_content_until_the_new_one_is_complete(
        self, fs: LocalFileSystem, tmp_path: Path
    ) -> None:
        target = tmp_path / "state"
        fs.write_bytes(str(target), b"old")

        with fs.open_write(str(target)) as handle:
            handle.write(b"new-but-not-finished")
            assert target.read_bytes() == b"old"

        assert target.read_bytes() == b"new-but-not-finished"

    def test_a_write_that_raises_leaves_neither_the_file_nor_a_temporary(
        self, fs: LocalFileSystem, tmp_path: Path
    ) -> None:
        class Boom(Exception):
            pass

        with pytest.raises(Boom), fs.open_write(str(tmp_path / "d" / "f")) as handle:
            handle.write(b"partial")
            raise Boom

        assert _visible_files(tmp_path) == []

    def test_write_bytes_replaces_the_file_without_leaving_temporaries(
        self, fs: LocalFileSystem, tmp_path: Path
    ) -> None:
        for content in (b"1", b"22", b"333"):
            fs.write_bytes(str(tmp_path / "f"), content)

        assert (tmp_path / "f").read_bytes() == b"333"
        assert os.listdir(tmp_path) == ["f"]


class TestListingAndDeletion:
    def test_listing_is_recursive_sorted_and_keeps_the_uri_form(
        self, fs: LocalFileSystem, tmp_path: Path
    ) -> None:
        for name in ("b/2", "a/1", "a/deep/3", "top"):
            fs.write_bytes(str(tmp_path / "root" / name), b"x")

        assert fs.list(f"file://{tmp_path}/root") == [
            f"file://{tmp_path}/root/a/1",
            f"file://{tmp_path}/root/a/deep/3",
            f"file://{tmp_path}/root/b/2",
            f"file://{tmp_path}/root/top",
        ]
        assert fs.list(str(tmp_path / "root" / "a") + "/") == [
            f"{tmp_path}/root/a/1",
            f"{tmp_path}/root/a/deep/3",
        ]

    def test_listing_a_single_file_gives_that_file_and_a_missing_prefix_nothing(
        self, fs: LocalFileSystem, tmp_path: Path
    ) -> None:
        fs.write_bytes(str(tmp_path / "one"), b"x")

        assert fs.list(str(tmp_path / "one")) == [str(tmp_path / "one")]
        assert fs.list(str(tmp_path / "missing")) == []

    def test_delete_prefix_removes_everything_below_and_spares_similar_names(
        self, fs: LocalFileSystem, tmp_path: Path
    ) -> None:
        for name in ("chk-1/op/0", "chk-1/_metadata", "chk-10/_metadata"):
            fs.write_bytes(str(tmp_path / name), b"x")

        fs.delete_prefix(str(tmp_path / "chk-1"))

        assert _visible_files(tmp_path) == ["chk-10/_metadata"]

    def test_deleting_what_does_not_exist_is_not_an_error(
        self, fs: LocalFileSystem, tmp_path: Path
    ) -> None:
        fs.delete(str(tmp_path / "nope"))
        fs.delete_prefix(str(tmp_path / "nope"))
        assert not fs.exists(str(tmp_path / "nope"))


class TestRename:
    def test_rename_moves_the_file_and_replaces_the_destination(
        self, fs: LocalFileSystem, tmp_path: Path
    ) -> None:
        fs.write_bytes(str(tmp_path / "_pending" / "a.inprogress"), b"new")
        fs.write_bytes(str(tmp_path / "final" / "a"), b"old")

        fs.rename(str(tmp_path / "_pending" / "a.inprogress"), str(tmp_path / "final" / "a"))

        assert fs.read_bytes(str(tmp_path / "final" / "a")) == b"new"
        assert not fs.exists(str(tmp_path / "_pending" / "a.inprogress"))

    def test_renaming_a_missing_source_says_which_file_is_missing(
        self, fs: LocalFileSystem, tmp_path: Path
    ) -> None:
        with pytest.raises(StorageNotFoundError) as caught:
            fs.rename(str(tmp_path / "gone"), str(tmp_path / "dst"))

        assert str(tmp_path / "gone") in str(caught.value)
        assert not fs.exists(str(tmp_path / "dst"))


class TestErrors:
    def test_reading_a_missing_file_names_the_uri_and_hides_the_os_traceback(
        self, fs: LocalFileSystem, tmp_path: Path
    ) -> None:
        with pytest.raises(StorageNotFoundError) as caught:
            fs.read_bytes(str(tmp_path / "missing"))

        assert caught.value.uri == str(tmp_path / "missing")
        assert "no such file" in str(caught.value)
        assert caught.value.__cause__ is None
        assert caught.value.__suppress_context__

    def test_reading_a_directory_is_a_storage_error(
        self, fs: LocalFileSystem, tmp_path: Path
    ) -> None:
        with pytest.raises(StorageError):
            fs.read_bytes(str(tmp_path))

    @pytest.mark.parametrize("uri", ["hdfs://nn/x", "gs://bucket/x", "file://otherhost/x", ""])
    def test_unsupported_uris_are_rejected_with_a_reason(self, uri: str) -> None:
        with pytest.raises(UnsupportedUriError) as caught:
            get_filesystem(uri).read_bytes(uri)

        assert caught.value.cause

    def test_errors_survive_pickling_with_their_fields(self) -> None:
        error = StorageNotFoundError(uri="s3://b/k", operation="read", cause="no such object")

        copy = pickle.loads(pickle.dumps(error))

        assert type(copy) is StorageNotFoundError
        assert (copy.uri, copy.cause, str(copy)) == (error.uri, error.cause, str(error))


class TestFactory:
    def test_schemes_choose_the_file_system(self) -> None:
        assert isinstance(get_filesystem("/abs/path"), LocalFileSystem)
        assert isinstance(get_filesystem("file:///abs/path"), LocalFileSystem)
        assert isinstance(get_filesystem("s3://bucket/key"), S3FileSystem)
        assert isinstance(get_filesystem("s3a://bucket/key"), S3FileSystem)

    def test_join_adds_single_slashes(self, fs: LocalFileSystem) -> None:
        assert fs.join("s3://b", "job", "/chk-1/", "_metadata") == "s3://b/job/chk-1/_metadata"
        assert fs.join("file:///data/", "x") == "file:///data/x"
        assert fs.join("/", "x", "") == "/x"
