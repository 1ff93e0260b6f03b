"""Checkpoint storage: file systems (local and S3) and the checkpoint directory layout."""

from job_runtime.storage.checkpoint_storage import (
    CheckpointLocation,
    CheckpointStorage,
    StateHandle,
    parse_checkpoint_uri,
    parse_metadata_uri,
    read_metadata,
    verify_metadata_readable,
)
from job_runtime.storage.errors import (
    CorruptDataError,
    InvalidCheckpointPathError,
    StorageAccessDeniedError,
    StorageError,
    StorageNotFoundError,
    StorageUnavailableError,
    UnsupportedUriError,
)
from job_runtime.storage.filesystem import (
    FileSystem,
    LocalFileSystem,
    S3Config,
    S3FileSystem,
    get_filesystem,
)

__all__ = [
    "CheckpointLocation",
    "CheckpointStorage",
    "CorruptDataError",
    "FileSystem",
    "InvalidCheckpointPathError",
    "LocalFileSystem",
    "S3Config",
    "S3FileSystem",
    "StateHandle",
    "StorageAccessDeniedError",
    "StorageError",
    "StorageNotFoundError",
    "StorageUnavailableError",
    "UnsupportedUriError",
    "get_filesystem",
    "parse_checkpoint_uri",
    "parse_metadata_uri",
    "read_metadata",
    "verify_metadata_readable",
]
