"""Objects in an S3 API through boto3: the file system, how to reach the API (one
shared client per configuration), and boto3's errors as storage errors a user can
act on."""

from __future__ import annotations

import builtins
import contextlib
import io
import logging
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, cast
from urllib.parse import urlsplit

from cjob_checkpoint.storage.errors import (
    StorageAccessDeniedError,
    StorageError,
    StorageNotFoundError,
    StorageUnavailableError,
    UnsupportedUriError,
)
from cjob_checkpoint.storage.file_system import FileSystem

if TYPE_CHECKING:
    from collections.abc import Callable

_log = logging.getLogger(__name__)

S3_SCHEMES = ("s3", "s3a")
"""URI schemes served by :class:`S3FileSystem` (``s3a`` is what Spark users write)."""

MULTIPART_THRESHOLD = 8 * 1024 * 1024
"""Uploads larger than this go through multipart upload; smaller ones are one PUT."""

_READ_BUFFER = 1024 * 1024


def is_s3_uri(uri: str) -> bool:
    """Whether ``uri`` is served by :class:`S3FileSystem`."""
    return urlsplit(uri).scheme.lower() in S3_SCHEMES


@dataclass(frozen=True, kw_only=True)
class S3Config:
    """How to reach an S3 API.

    ``None`` credentials fall back to boto3's default chain (environment,
    shared files, web identity), which is what a pod with a mounted role wants.
    Addressing is path-style (``http://endpoint/bucket/key``), which MinIO and
    moto serve without wildcard DNS. The timeouts and retries bound how long a
    call waits on an unreachable endpoint before :class:`StorageUnavailableError`.
    """

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    max_attempts: int = 4

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> S3Config:
        """Read the standard ``AWS_*`` variables (``AWS_ENDPOINT_URL_S3`` wins)."""
        env = os.environ if environ is None else environ

        def _get(*names: str) -> str | None:
            for name in names:
                value = env.get(name)
                if value:
                    return value
            return None

        return cls(
            endpoint_url=_get("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
            region=_get("AWS_REGION", "AWS_DEFAULT_REGION"),
            access_key_id=_get("AWS_ACCESS_KEY_ID"),
            secret_access_key=_get("AWS_SECRET_ACCESS_KEY"),
            session_token=_get("AWS_SESSION_TOKEN"),
        )

    def to_env(self) -> dict[str, str]:
        """The environment variables that make :meth:`from_env` return this config
        (timeouts excluded); used to hand the config to a driver or executor."""
        pairs = {
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_SESSION_TOKEN": self.session_token,
        }
        return {name: value for name, value in pairs.items() if value}

    def __repr__(self) -> str:
        secret = "***" if self.secret_access_key else None
        return (
            f"S3Config(endpoint_url={self.endpoint_url!r}, region={self.region!r}, "
            f"access_key_id={self.access_key_id!r}, secret_access_key={secret!r}, "
            f"connect_timeout={self.connect_timeout}, read_timeout={self.read_timeout}, "
            f"max_attempts={self.max_attempts})"
        )


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")``; the key may be empty."""
    parts = urlsplit(uri)
    if parts.scheme.lower() not in S3_SCHEMES:
        raise UnsupportedUriError(uri=uri, operation="use", cause="not an s3:// URI")
    if not parts.netloc:
        raise UnsupportedUriError(uri=uri, operation="use", cause="the URI names no bucket")
    if parts.query or parts.fragment:
        raise UnsupportedUriError(
            uri=uri, operation="use", cause="S3 URIs may not carry '?' or '#' parts"
        )
    return parts.netloc, parts.path.lstrip("/")


class S3FileSystem(FileSystem):
    """Objects in an S3 API, through one thread-safe boto3 client.

    The client is created lazily and dropped when the object is pickled, so a
    file system (or a :class:`~cjob_checkpoint.checkpoint_storage.CheckpointStorage`
    holding one) can be shipped to Spark executors.
    """

    def __init__(self, *, config: S3Config | None = None) -> None:
        self.config = config if config is not None else S3Config.from_env()
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = state["config"]
        self._client = None

    def prepare(self) -> None:
        """Create the client (a few hundred milliseconds) without a request."""
        _ = self.client

    @property
    def client(self) -> Any:
        """The boto3 S3 client (created on first use)."""
        if self._client is None:
            self._client = shared_s3_client(self.config)
        return self._client

    def _endpoint(self) -> str:
        return self.config.endpoint_url or "the default S3 endpoint"

    def _call(self, uri: str, operation: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:
            mapped = map_s3_error(exc, uri=uri, operation=operation, endpoint=self._endpoint())
            if mapped is None:
                raise
            raise mapped from None

    def write_bytes(self, uri: str, data: bytes) -> None:
        bucket, key = self._object(uri)
        if len(data) <= MULTIPART_THRESHOLD:
            self._call(uri, "write", lambda: self.client.put_object(
                Bucket=bucket, Key=key, Body=data))
            return
        self._call(uri, "write", lambda: self.client.upload_fileobj(
            io.BytesIO(data), bucket, key, Config=_transfer_config()))

    def read_bytes(self, uri: str) -> bytes:
        bucket, key = self._object(uri)

        def _read() -> bytes:
            response = self.client.get_object(Bucket=bucket, Key=key)
            with contextlib.closing(response["Body"]) as body:
                return cast(bytes, body.read())

        return cast(bytes, self._call(uri, "read", _read))

    def open_read(self, uri: str) -> BinaryIO:
        bucket, key = self._object(uri)
        length = self.size(uri)
        raw = _S3RangeReader(fs=self, uri=uri, bucket=bucket, key=key, length=length)
        return cast(BinaryIO, io.BufferedReader(raw, buffer_size=_READ_BUFFER))

    def open_write(self, uri: str) -> AbstractContextManager[BinaryIO]:
        return self._open_write(uri)

    @contextlib.contextmanager
    def _open_write(self, uri: str) -> Iterator[BinaryIO]:
        bucket, key = self._object(uri)
        with tempfile.SpooledTemporaryFile(max_size=MULTIPART_THRESHOLD) as spool:
            yield cast(BinaryIO, spool)
            spool.seek(0)
            self._call(uri, "write", lambda: self.client.upload_fileobj(
                spool, bucket, key, Config=_transfer_config()))

    def exists(self, uri: str) -> bool:
        bucket, key = split_s3_uri(uri)
        if key and not key.endswith("/"):
            try:
                self._call(uri, "stat", lambda: self.client.head_object(Bucket=bucket, Key=key))
                return True
            except StorageNotFoundError:
                pass
        prefix = _dir_prefix(key)
        try:
            response = self._call(uri, "list", lambda: self.client.list_objects_v2(
                Bucket=bucket, Prefix=prefix, MaxKeys=1))
        except StorageNotFoundError:
            return False
        return bool(response.get("KeyCount", 0))

    def size(self, uri: str) -> int:
        bucket, key = self._object(uri)
        response = self._call(uri, "stat", lambda: self.client.head_object(Bucket=bucket, Key=key))
        return int(response["ContentLength"])

    def delete(self, uri: str) -> None:
        bucket, key = self._object(uri)
        try:
            self._call(uri, "delete", lambda: self.client.delete_object(Bucket=bucket, Key=key))
        except StorageNotFoundError:
            return

    def delete_prefix(self, uri: str) -> None:
        bucket, key = split_s3_uri(uri)
        keys = [k for _size, k in self._list_keys(uri, bucket, _dir_prefix(key))]
        if key and not key.endswith("/"):
            keys.append(key)
        for start in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[start:start + 1000]]

            def _delete(objects: builtins.list[dict[str, str]] = batch) -> Any:
                return self.client.delete_objects(
                    Bucket=bucket, Delete={"Objects": objects, "Quiet": True})

            response = self._call(uri, "delete", _delete)
            errors = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                first = errors[0]
                raise StorageError(
                    uri=uri, operation="delete",
                    cause=f"{len(errors)} objects were not deleted, e.g. {first.get('Key')}: "
                          f"{first.get('Code')} {first.get('Message', '')}".rstrip(),
                )

    def list(self, prefix_uri: str) -> list[str]:
        bucket, key = split_s3_uri(prefix_uri)
        base = prefix_uri.rstrip("/")
        prefix = _dir_prefix(key)
        found = [
            base + "/" + k[len(prefix):]
            for _size, k in self._list_keys(prefix_uri, bucket, prefix)
            if not k.endswith("/")
        ]
        if not found and key and not key.endswith("/"):
            try:
                self._call(prefix_uri, "stat",
                           lambda: self.client.head_object(Bucket=bucket, Key=key))
                return [prefix_uri]
            except StorageNotFoundError:
                return []
        return sorted(found)

    def unfinished_uploads(self, prefix_uri: str) -> builtins.list[str]:
        bucket, key = split_s3_uri(prefix_uri)
        base = prefix_uri.rstrip("/")
        prefix = _dir_prefix(key)
        return sorted(base + "/" + upload_key[len(prefix):]
                      for upload_key, _id in self._list_uploads(prefix_uri, bucket, prefix))

    def abort_uploads(self, prefix_uri: str) -> int:
        bucket, key = split_s3_uri(prefix_uri)
        uploads = self._list_uploads(prefix_uri, bucket, _dir_prefix(key))
        for upload_key, upload_id in uploads:
            def _abort(upload_key: str = upload_key, upload_id: str = upload_id) -> Any:
                return self.client.abort_multipart_upload(
                    Bucket=bucket, Key=upload_key, UploadId=upload_id)

            try:
                self._call(prefix_uri, "abort an upload", _abort)
            except StorageNotFoundError:
                continue  # completed or aborted meanwhile
        return len(uploads)

    def _list_uploads(self, uri: str, bucket: str,
                      prefix: str) -> builtins.list[tuple[str, str]]:
        def _walk() -> builtins.list[tuple[str, str]]:
            found: builtins.list[tuple[str, str]] = []
            paginator = self.client.get_paginator("list_multipart_uploads")
            for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
                for upload in page.get("Uploads", []):
                    found.append((str(upload["Key"]), str(upload["UploadId"])))
            return found

        return cast(builtins.list[tuple[str, str]], self._call(uri, "list uploads", _walk))

    def rename(self, src: str, dst: str) -> None:
        src_bucket, src_key = self._object(src)
        dst_bucket, dst_key = self._object(dst)
        if (src_bucket, src_key) == (dst_bucket, dst_key):
            self.size(src)  # raises when missing, like os.replace would
            return
        self._call(src, f"copy to {dst}", lambda: self.client.copy(
            {"Bucket": src_bucket, "Key": src_key}, dst_bucket, dst_key,
            Config=_transfer_config()))
        self.delete(src)

    def _object(self, uri: str) -> tuple[str, str]:
        bucket, key = split_s3_uri(uri)
        if not key or key.endswith("/"):
            raise UnsupportedUriError(uri=uri, operation="use", cause="the URI names no object key")
        return bucket, key

    def _list_keys(self, uri: str, bucket: str, prefix: str) -> builtins.list[tuple[int, str]]:
        def _walk() -> builtins.list[tuple[int, str]]:
            keys: builtins.list[tuple[int, str]] = []
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    keys.append((int(item.get("Size", 0)), str(item["Key"])))
            return keys

        return cast(builtins.list[tuple[int, str]], self._call(uri, "list", _walk))


def _dir_prefix(key: str) -> str:
    return key if not key or key.endswith("/") else key + "/"


def _transfer_config() -> Any:
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(
        multipart_threshold=MULTIPART_THRESHOLD,
        multipart_chunksize=MULTIPART_THRESHOLD,
        max_concurrency=4,
    )


_CLIENTS: dict[tuple[int, S3Config], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def shared_s3_client(config: S3Config) -> Any:
    """One client per configuration and process: creating a client costs a few
    hundred milliseconds, and clients are thread-safe. Keyed by the process id
    so a forked child never reuses its parent's connections."""
    key = (os.getpid(), config)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = build_s3_client(config)
            _CLIENTS[key] = client
        return client


def build_s3_client(config: S3Config) -> Any:
    """A new boto3 S3 client for ``config``: path-style, bounded timeouts and retries."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(
        aws_access_key_id=config.access_key_id,
        aws_secret_access_key=config.secret_access_key,
        aws_session_token=config.session_token,
        region_name=config.region or "us-east-1",
    )
    options: dict[str, Any] = {
        "s3": {"addressing_style": "path"},
        "connect_timeout": config.connect_timeout,
        "read_timeout": config.read_timeout,
        "retries": {"total_max_attempts": max(1, config.max_attempts), "mode": "standard"},
        "tcp_keepalive": True,
    }
    try:
        # Checksums only where S3 requires them: MinIO and older S3 clones reject
        # the trailing-checksum uploads newer botocore sends by default.
        botocore_config = Config(
            **options,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
    except TypeError:  # botocore older than 1.36 has neither option nor the default
        botocore_config = Config(**options)
    return session.client("s3", endpoint_url=config.endpoint_url, config=botocore_config)


_NOT_FOUND_CODES = {"NoSuchKey", "404", "NotFound", "NoSuchBucket", "NoSuchUpload"}
_DENIED_CODES = {
    "AccessDenied", "403", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch",
    "ExpiredToken", "InvalidToken", "AllAccessDisabled",
}
_UNAVAILABLE_CODES = {
    "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "503", "500",
    "502", "504", "RequestTimeTooSkewed",
}


def map_s3_error(
    exc: BaseException, *, uri: str, operation: str, endpoint: str
) -> StorageError | None:
    """Translate a boto3/botocore exception into a :class:`StorageError`.

    Returns ``None`` for exceptions that are not storage failures (programming
    errors), which the caller re-raises unchanged.
    """
    from boto3.exceptions import S3UploadFailedError
    from botocore import exceptions as bce

    _log.debug("S3 %s %s failed", operation, uri, exc_info=exc)
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, bce.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = str(error.get("Message", "") or "")
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code == "NoSuchBucket":
            bucket = split_s3_uri(uri)[0] if is_s3_uri(uri) else "?"
            return StorageNotFoundError(
                uri=uri, operation=operation, cause=f"bucket {bucket!r} does not exist"
            )
        if code in _NOT_FOUND_CODES or status == 404:
            return StorageNotFoundError(uri=uri, operation=operation, cause="no such object")
        if code in _DENIED_CODES or status == 403:
            return StorageAccessDeniedError(
                uri=uri, operation=operation,
                cause=f"access denied by {endpoint} ({code or status}); check the S3 "
                      "credentials and the bucket policy",
            )
        if code in _UNAVAILABLE_CODES or status >= 500:
            return StorageUnavailableError(
                uri=uri, operation=operation,
                cause=f"{endpoint} answered {code or status}"
                      + (f": {message}" if message else "") + " (after retries)",
            )
        return StorageError(
            uri=uri, operation=operation, cause=f"{code or status}: {message or 'S3 error'}"
        )
    if isinstance(exc, bce.NoCredentialsError | bce.PartialCredentialsError):
        return StorageAccessDeniedError(
            uri=uri, operation=operation,
            cause="no S3 credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                  "or the job's checkpoint.s3.credentialsSecret",
        )
    if isinstance(exc, bce.ConnectTimeoutError | bce.ReadTimeoutError):
        return StorageUnavailableError(
            uri=uri, operation=operation, cause=f"{endpoint} timed out (after retries)"
        )
    if isinstance(
        exc,
        bce.EndpointConnectionError
        | bce.ConnectionClosedError
        | bce.HTTPClientError
        | bce.ResponseStreamingError
        | bce.IncompleteReadError,
    ):
        return StorageUnavailableError(
            uri=uri, operation=operation,
            cause=f"{endpoint} is unreachable or dropped the connection "
                  f"({type(exc).__name__}, after retries)",
        )
    if isinstance(exc, bce.ParamValidationError):
        return StorageError(uri=uri, operation=operation, cause=f"invalid request: {exc}")
    inner = exc.__cause__ or exc.__context__
    if isinstance(exc, S3UploadFailedError):
        if inner is not None:
            mapped = map_s3_error(inner, uri=uri, operation=operation, endpoint=endpoint)
            if mapped is not None:
                return mapped
        return StorageError(uri=uri, operation=operation, cause=str(exc))
    if isinstance(exc, OSError):
        return StorageUnavailableError(
            uri=uri, operation=operation,
            cause=f"{endpoint} is unreachable ({type(exc).__name__}: {exc})",
        )
    module = type(exc).__module__
    if module.startswith(("urllib3", "botocore", "s3transfer")):
        return StorageUnavailableError(
            uri=uri, operation=operation,
            cause=f"{endpoint} failed ({type(exc).__name__})",
        )
    return None


class _S3RangeReader(io.RawIOBase):
    """A seekable raw stream over one object: reads with ranged GETs from the
    current position and reopens the stream after a seek."""

    def __init__(self, *, fs: S3FileSystem, uri: str, bucket: str, key: str, length: int) -> None:
        super().__init__()
        self._fs = fs
        self._uri = uri
        self._bucket = bucket
        self._key = key
        self._length = length
        self._position = 0
        self._body: Any = None
        self._body_position = -1

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            target = offset
        elif whence == io.SEEK_CUR:
            target = self._position + offset
        elif whence == io.SEEK_END:
            target = self._length + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if target < 0:
            raise ValueError("negative seek position")
        self._position = target
        return target

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._position >= self._length or len(view) == 0:
            return 0
        if self._body is None or self._body_position != self._position:
            self._close_body()
            position = self._position
            response = self._fs._call(self._uri, "read", lambda: self._fs.client.get_object(
                Bucket=self._bucket, Key=self._key, Range=f"bytes={position}-"))
            self._body = response["Body"]
            self._body_position = position
        chunk = self._fs._call(self._uri, "read", lambda: self._body.read(len(view)))
        count = len(chunk)
        view[:count] = chunk
        self._position += count
        self._body_position += count
        if count == 0:
            raise StorageUnavailableError(
                uri=self._uri, operation="read",
                cause="the object ended early; it may have been replaced while being read",
            )
        return count

    def _close_body(self) -> None:
        if self._body is not None:
            with contextlib.suppress(Exception):
                self._body.close()
            self._body = None

    def close(self) -> None:
        self._close_body()
        super().close()
