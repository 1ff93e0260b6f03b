"""The S3 file system against a real S3 API (moto's server), including outages."""

from __future__ import annotations

import os
import pickle
import time

import pytest

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.storage.errors import (
    StorageAccessDeniedError,
    StorageNotFoundError,
    StorageUnavailableError,
    UnsupportedUriError,
)
from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.local import LocalFileSystem
from cjob_checkpoint.storage.s3 import MULTIPART_THRESHOLD, S3Config, S3FileSystem
from cjob_checkpoint.store.completed_store import CompletedCheckpoint, UnreadableCheckpointError
from e2e.s3 import FaultyS3, S3Bucket, build_config, find_free_port

JOB = "clicks-7d3e"


@pytest.fixture
def fs(s3_bucket: S3Bucket) -> S3FileSystem:
    return S3FileSystem(config=s3_bucket.s3_config)


def _keys(bucket: S3Bucket) -> list[str]:
    response = bucket.client.list_objects_v2(Bucket=bucket.bucket)
    return sorted(item["Key"] for item in response.get("Contents", []))


class TestRoundTrips:
    def test_bytes_written_are_read_back(self, fs: S3FileSystem, s3_bucket: S3Bucket) -> None:
        uri = f"{s3_bucket.uri}/dir/data.bin"
        fs.write_bytes(uri, b"\x00\x01payload")

        assert fs.read_bytes(uri) == b"\x00\x01payload"
        assert fs.size(uri) == 9
        assert fs.exists(uri)
        assert fs.exists(f"{s3_bucket.uri}/dir")
        assert not fs.exists(f"{s3_bucket.uri}/di")

    def test_a_large_streamed_write_uses_multipart_and_reads_back_with_seeks(
        self, fs: S3FileSystem, s3_bucket: S3Bucket
    ) -> None:
        uri = f"{s3_bucket.uri}/big/object"
        chunk = bytes(range(256)) * 4096  # 1 MiB
        chunks = MULTIPART_THRESHOLD // len(chunk) + 2
        with fs.open_write(uri) as handle:
            for _ in range(chunks):
                handle.write(chunk)

        head = s3_bucket.client.head_object(Bucket=s3_bucket.bucket, Key="big/object")
        assert "-" in head["ETag"]  # multipart ETags end in -<parts>
        assert fs.size(uri) == len(chunk) * chunks
        with fs.open_read(uri) as reader:
            reader.seek(len(chunk) * 3 + 10)
            assert reader.read(6) == chunk[10:16]
            reader.seek(-4, os.SEEK_END)
            assert reader.read() == chunk[-4:]

    def test_a_streamed_write_that_raises_uploads_nothing(
        self, fs: S3FileSystem, s3_bucket: S3Bucket
    ) -> None:
        with pytest.raises(RuntimeError), fs.open_write(f"{s3_bucket.uri}/x") as handle:
            handle.write(b"half")
            raise RuntimeError("producer failed")

        assert _keys(s3_bucket) == []

    def test_the_environment_configures_the_file_system(
        self, s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        for name, value in s3_bucket.env.items():
            monkeypatch.setenv(name, value)
        s3_bucket.client.put_object(Bucket=s3_bucket.bucket, Key="k", Body=b"from env")

        fs = get_filesystem(f"{s3_bucket.uri}/k")

        assert fs.read_bytes(f"{s3_bucket.uri}/k") == b"from env"
        assert S3Config.from_env().endpoint_url == s3_bucket.endpoint_url

    def test_the_file_system_pickles_without_its_client(
        self, fs: S3FileSystem, s3_bucket: S3Bucket
    ) -> None:
        fs.write_bytes(f"{s3_bucket.uri}/k", b"v")

        copy = pickle.loads(pickle.dumps(fs))

        assert copy.read_bytes(f"{s3_bucket.uri}/k") == b"v"
        assert "secret" not in repr(copy.config).replace("secret_access_key", "")


class TestListingDeletionRename:
    def test_listing_is_recursive_sorted_and_treats_the_key_as_a_directory(
        self, fs: S3FileSystem, s3_bucket: S3Bucket
    ) -> None:
        for key in ("job/chk-10/_metadata", "job/chk-1/op/1", "job/chk-1/_metadata",
                    "job/chk-1/op/0"):
            fs.write_bytes(f"{s3_bucket.uri}/{key}", b"x")

        assert fs.list(f"{s3_bucket.uri}/job/chk-1") == [
            f"{s3_bucket.uri}/job/chk-1/_metadata",
            f"{s3_bucket.uri}/job/chk-1/op/0",
            f"{s3_bucket.uri}/job/chk-1/op/1",
        ]
        assert len(fs.list(s3_bucket.uri)) == 4
        assert fs.list(f"{s3_bucket.uri}/job/chk-10/_metadata") == [
            f"{s3_bucket.uri}/job/chk-10/_metadata"]
        assert fs.list(f"{s3_bucket.uri}/nothing") == []

    def test_delete_prefix_removes_everything_below_and_spares_similar_names(
        self, fs: S3FileSystem, s3_bucket: S3Bucket
    ) -> None:
        for key in ("job/chk-1/op/0", "job/chk-1/_metadata", "job/chk-10/_metadata"):
            fs.write_bytes(f"{s3_bucket.uri}/{key}", b"x")

        fs.delete_prefix(f"{s3_bucket.uri}/job/chk-1")
        fs.delete_prefix(f"{s3_bucket.uri}/job/chk-99")
        fs.delete(f"{s3_bucket.uri}/job/missing")

        assert _keys(s3_bucket) == ["job/chk-10/_metadata"]

    def test_rename_copies_then_deletes_and_a_missing_source_is_not_found(
        self, fs: S3FileSystem, s3_bucket: S3Bucket
    ) -> None:
        fs.write_bytes(f"{s3_bucket.uri}/out/_pending/a.inprogress", b"records")
        fs.write_bytes(f"{s3_bucket.uri}/out/a", b"stale")

        fs.rename(f"{s3_bucket.uri}/out/_pending/a.inprogress", f"{s3_bucket.uri}/out/a")

        assert _keys(s3_bucket) == ["out/a"]
        assert fs.read_bytes(f"{s3_bucket.uri}/out/a") == b"records"
        with pytest.raises(StorageNotFoundError):
            fs.rename(f"{s3_bucket.uri}/out/_pending/a.inprogress", f"{s3_bucket.uri}/out/a")


class TestErrors:
    def test_a_missing_object_is_not_found(self, fs: S3FileSystem, s3_bucket: S3Bucket) -> None:
        with pytest.raises(StorageNotFoundError) as caught:
            fs.read_bytes(f"{s3_bucket.uri}/missing")

        assert caught.value.uri == f"{s3_bucket.uri}/missing"
        assert caught.value.__cause__ is None and caught.value.__suppress_context__

    def test_a_missing_bucket_is_named(self, fs: S3FileSystem) -> None:
        with pytest.raises(StorageNotFoundError, match="bucket 'no-such-bucket-x' does not"):
            fs.write_bytes("s3://no-such-bucket-x/k", b"x")

    @pytest.mark.parametrize("uri", ["s3:///key", "s3://bucket", "s3://bucket/dir/"])
    def test_uris_without_a_bucket_or_key_are_refused(self, fs: S3FileSystem, uri: str) -> None:
        with pytest.raises(UnsupportedUriError):
            fs.read_bytes(uri)

    def test_a_closed_port_is_reported_as_unavailable_with_the_endpoint(self) -> None:
        endpoint = f"http://127.0.0.1:{find_free_port()}"
        fs = S3FileSystem(config=build_config(endpoint, connect_timeout=1.0, max_attempts=2))

        with pytest.raises(StorageUnavailableError) as caught:
            fs.read_bytes("s3://bucket/key")

        message = str(caught.value)
        assert endpoint in message and "unreachable" in message
        assert "Traceback" not in message and caught.value.__cause__ is None


    def test_missing_credentials_are_reported_with_what_to_set(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: object
    ) -> None:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                     "AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                     "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", f"{tmp_path}/none")
        monkeypatch.setenv("AWS_CONFIG_FILE", f"{tmp_path}/none")
        endpoint = f"http://127.0.0.1:{find_free_port()}"
        fs = S3FileSystem(config=S3Config(endpoint_url=endpoint, region="us-east-1"))

        with pytest.raises(StorageAccessDeniedError, match="AWS_ACCESS_KEY_ID"):
            fs.read_bytes("s3://bucket/key")


class TestPrepare:
    """``prepare`` does the first request's one-time work ahead: a standby's parked
    subtasks pay for the S3 client before the promotion, not after it."""

    def test_prepare_creates_the_client_without_a_request(self) -> None:
        endpoint = f"http://127.0.0.1:{find_free_port()}"  # nothing listens there
        fs = S3FileSystem(config=build_config(endpoint, connect_timeout=1.0, max_attempts=1))
        fs.prepare()
        assert fs._client is not None

    def test_the_prepared_client_is_the_one_requests_use(
        self, fs: S3FileSystem, s3_bucket: S3Bucket
    ) -> None:
        fs.prepare()
        prepared = fs._client
        fs.write_bytes(f"{s3_bucket.uri}/k", b"v")
        assert fs.read_bytes(f"{s3_bucket.uri}/k") == b"v"
        assert fs.client is prepared

    def test_a_local_file_system_has_nothing_to_prepare(self) -> None:
        LocalFileSystem().prepare()


class TestOutages:
    def test_dropped_connections_are_reported_as_unavailable(self, s3_faults: FaultyS3) -> None:
        fs = S3FileSystem(config=s3_faults.s3_config)
        s3_faults.proxy.drop_connections()

        with pytest.raises(StorageUnavailableError) as caught:
            fs.write_bytes(f"{s3_faults.uri}/k", b"x")

        assert s3_faults.endpoint_url in str(caught.value)
        assert s3_faults.proxy.connections >= 2  # the client retried before giving up

    def test_an_endpoint_that_never_answers_times_out_as_unavailable(
        self, s3_faults: FaultyS3
    ) -> None:
        fs = S3FileSystem(config=s3_faults.s3_config)
        s3_faults.proxy.hang()

        with pytest.raises(StorageUnavailableError, match="timed out"):
            fs.read_bytes(f"{s3_faults.uri}/k")

    def test_server_errors_are_reported_as_unavailable_with_the_code(
        self, s3_faults: FaultyS3
    ) -> None:
        fs = S3FileSystem(config=s3_faults.s3_config)
        s3_faults.proxy.fail_with(503, "SlowDown")

        with pytest.raises(StorageUnavailableError, match="SlowDown"):
            fs.read_bytes(f"{s3_faults.uri}/k")
        with pytest.raises(StorageUnavailableError, match="503"):
            fs.exists(f"{s3_faults.uri}/k")  # HEAD answers carry no error body

    def test_the_file_system_recovers_when_the_endpoint_comes_back(
        self, s3_faults: FaultyS3
    ) -> None:
        fs = S3FileSystem(config=s3_faults.s3_config)
        fs.write_bytes(f"{s3_faults.uri}/k", b"before")
        s3_faults.proxy.drop_connections()
        with pytest.raises(StorageUnavailableError):
            fs.read_bytes(f"{s3_faults.uri}/k")

        s3_faults.proxy.pass_through()

        assert fs.read_bytes(f"{s3_faults.uri}/k") == b"before"

    def test_a_slow_endpoint_within_the_timeout_still_works(self, s3_faults: FaultyS3) -> None:
        fs = S3FileSystem(config=s3_faults.s3_config)
        s3_faults.proxy.delay(0.2)

        fs.write_bytes(f"{s3_faults.uri}/k", b"slow but fine")

        assert fs.read_bytes(f"{s3_faults.uri}/k") == b"slow but fine"

    def test_an_outage_while_restoring_is_not_mistaken_for_an_unreadable_checkpoint(
        self, s3_faults: FaultyS3
    ) -> None:
        storage = CheckpointStorage(f"{s3_faults.uri}/ckpt", JOB,
                                    fs=S3FileSystem(config=s3_faults.s3_config))
        pointer = storage.write_metadata(1, b"meta")
        s3_faults.proxy.drop_connections()

        with pytest.raises(StorageUnavailableError):
            storage.read_metadata(pointer)


class TestCheckpointsOnS3:
    def test_a_checkpoint_is_written_read_and_discarded_on_s3(
        self, fs: S3FileSystem, s3_bucket: S3Bucket
    ) -> None:
        storage = CheckpointStorage(f"{s3_bucket.uri}/ckpt", JOB, fs=fs)
        for checkpoint_id in (1, 10):
            for subtask in range(2):
                storage.write_state(checkpoint_id, "reduce", subtask, b"s")
            storage.write_metadata(checkpoint_id, f"meta {checkpoint_id}".encode())

        assert storage.read_metadata(storage.metadata_uri(10)) == b"meta 10"
        assert storage.list_completed_ids() == [1, 10]

        storage.discard(CompletedCheckpoint(checkpoint_id=1, timestamp=time.time(),
                                            metadata_path=storage.metadata_uri(1)))

        assert _keys(s3_bucket) == [f"ckpt/{JOB}/chk-10/_metadata",
                                    f"ckpt/{JOB}/chk-10/reduce/0",
                                    f"ckpt/{JOB}/chk-10/reduce/1"]
        with pytest.raises(UnreadableCheckpointError, match="does not exist"):
            storage.verify_metadata_readable(storage.metadata_uri(1))
