"""File systems (local and S3) and their errors: the lowest layer of checkpoint data.

The checkpoint directory layout built on them is :mod:`cjob_checkpoint.checkpoint_storage`.
"""

from cjob_checkpoint.storage.errors import (
    CorruptDataError,
    InvalidCheckpointPathError,
    StorageAccessDeniedError,
    StorageError,
    StorageNotFoundError,
    StorageUnavailableError,
    UnsupportedUriError,
)
from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.file_system import FileSystem
from cjob_checkpoint.storage.local import LocalFileSystem
from cjob_checkpoint.storage.s3 import S3Config, S3FileSystem

__all__ = [
    "CorruptDataError",
    "FileSystem",
    "InvalidCheckpointPathError",
    "LocalFileSystem",
    "S3Config",
    "S3FileSystem",
    "StorageAccessDeniedError",
    "StorageError",
    "StorageNotFoundError",
    "StorageUnavailableError",
    "UnsupportedUriError",
    "get_filesystem",
]
