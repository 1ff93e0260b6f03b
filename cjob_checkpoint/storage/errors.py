"""Errors raised by the storage layer.

Every error names the URI it concerns and a one-line cause a user can act on.
The S3 and OS errors behind them are translated at the boundary and not chained
(``raise ... from None``), so a job's failure message reads "the S3 endpoint is
unreachable" instead of three screens of botocore internals. The original
exception is logged at debug level where it is translated.

The classes pickle with their fields intact, because Spark ships exceptions
raised in executors back to the driver and ``multiprocessing`` does the same.
"""

from __future__ import annotations

from cjob_checkpoint.keyword_error import keyword_error


@keyword_error
class StorageError(Exception):
    """A file-system operation failed; ``reason`` is a CamelCase word for status."""

    reason = "StorageError"
    uri: str
    cause: str
    operation: str = "access"

    def describe(self) -> str:
        return f"cannot {self.operation} {self.uri}: {self.cause}"


class StorageUnavailableError(StorageError):
    """The storage could not be reached: refused connection, timeout, 5xx answer.

    The condition is usually transient, so callers retry or fail the attempt;
    it never means that a checkpoint is unreadable.
    """

    reason = "StorageUnavailable"


class StorageNotFoundError(StorageError):
    """The file, object or bucket does not exist."""

    reason = "StorageNotFound"


class StorageAccessDeniedError(StorageError):
    """Credentials are missing, wrong, or lack the permission for the operation."""

    reason = "StorageAccessDenied"


class UnsupportedUriError(StorageError):
    """The URI has a scheme no file system here understands, or is malformed."""

    reason = "UnsupportedUri"


class CorruptDataError(StorageError):
    """Data was read but does not match what was written (size or checksum)."""

    reason = "CorruptData"


class InvalidCheckpointPathError(StorageError):
    """A path does not follow the checkpoint layout or a name is not a safe segment."""

    reason = "InvalidCheckpointPath"
