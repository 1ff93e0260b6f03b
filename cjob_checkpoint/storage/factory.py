"""Which file system serves a URI: S3 for ``s3://`` and ``s3a://``, local otherwise."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from cjob_checkpoint.storage.errors import UnsupportedUriError
from cjob_checkpoint.storage.file_system import FileSystem
from cjob_checkpoint.storage.local import LocalFileSystem
from cjob_checkpoint.storage.s3 import S3_SCHEMES, S3Config, S3FileSystem


def get_filesystem(uri: str, *, s3: S3Config | None = None) -> FileSystem:
    """The file system serving ``uri``: S3 for ``s3://``/``s3a://``, local otherwise.

    Without ``s3``, an S3 file system reads its configuration from the
    environment (:meth:`S3Config.from_env`).
    """
    scheme = urlsplit(uri).scheme.lower()
    if scheme in S3_SCHEMES:
        return S3FileSystem(config=s3)
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        return LocalFileSystem()
    raise UnsupportedUriError(
        uri=uri, operation="use",
        cause=f"unsupported scheme {scheme!r}; use file:// (or a path) or s3://",
    )
