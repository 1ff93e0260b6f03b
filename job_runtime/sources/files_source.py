"""``files``: lines, JSON lines, CSV or Parquet from local paths or ``s3://`` prefixes.

Each file is one split, read as a stream so that a reader holds at most one block
of the file (and what was parsed from it) whatever the file's size: Parquet batch by
batch through its row groups (:mod:`job_runtime.sources.parquet_reader`), the line
formats (``text``, ``jsonl``, ``csv``) in blocks cut at record ends
(:mod:`job_runtime.sources.line_blocks`) that Arrow parses whole
(:mod:`job_runtime.sources.line_reader`).
"""

from __future__ import annotations

import fnmatch
from typing import IO, Any

from cjob_checkpoint.storage.factory import get_filesystem
from job_runtime.errors import PipelineDefinitionError
from job_runtime.sources.line_reader import SOURCE_NAME, LinePosition, LineReader
from job_runtime.sources.parquet_reader import ParquetReader
from job_runtime.sources.source_contract import Source, SourceContext, Split, SplitReader

__all__ = ["DEFAULT_BLOCK_SIZE", "FORMATS", "FilesSource", "LinePosition", "files"]
"""``LinePosition`` (of :mod:`job_runtime.sources.line_reader`) is named here too: a
files reader's position, as its tests and the documentation of checkpoints name it."""

FORMATS = ("text", "jsonl", "csv", "parquet")

DEFAULT_BLOCK_SIZE = 8 * 1024 * 1024
"""Bytes per block of a line format: large enough that Arrow's per-block cost
vanishes, small enough that many readers fit in an executor's memory."""


def _is_hidden(uri: str) -> bool:
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    return name.startswith((".", "_"))


class FilesSource(Source):
    name = SOURCE_NAME

    def __init__(self, *, paths: list[str], fmt: str, pattern: str | None,
                 batch_size: int | None, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if fmt not in FORMATS:
            raise PipelineDefinitionError(
                problem=f"files source format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        if not paths:
            raise PipelineDefinitionError(problem="files source needs at least one path")
        if batch_size is not None and batch_size < 1:
            raise PipelineDefinitionError(
                problem=f"files source batch_size must be at least 1, got {batch_size}")
        if block_size < 1:
            raise PipelineDefinitionError(
                problem=f"files source block_size must be at least 1, got {block_size}")
        self.paths = paths
        self.fmt = fmt
        self.pattern = pattern
        self.batch_size = batch_size
        self.block_size = block_size

    def _list(self, context: SourceContext) -> list[str]:
        found: list[str] = []
        for path in self.paths:
            fs = get_filesystem(path, s3=context.s3)
            if fs.exists(path) and not path.endswith("/"):
                try:
                    listed = fs.list(path)
                except Exception:
                    listed = []
                found.extend(listed or [path])
            else:
                found.extend(fs.list(path))
        files = sorted({f for f in found if not _is_hidden(f)})
        if self.pattern:
            files = [f for f in files if fnmatch.fnmatch(f.rsplit("/", 1)[-1], self.pattern)]
        return files

    def splits(self, *, context: SourceContext) -> list[Split]:
        return [Split(index=i, description=uri) for i, uri in enumerate(self._list(context))]

    def open(self, split: Split, position: Any, *, context: SourceContext) -> SplitReader:
        uri: str = split.description
        batch_size = self.batch_size or context.batch_size
        file: IO[bytes] = get_filesystem(uri, s3=context.s3).open_read(uri)
        try:
            if self.fmt == "parquet":
                return ParquetReader(file=file, offset=int(position or 0),
                                      batch_size=batch_size, columns=context.columns)
            return LineReader(uri=uri, file=file, fmt=self.fmt, position=position,
                               batch_size=batch_size, block_size=self.block_size,
                               columns=context.columns, subtask=context.subtask)
        except BaseException:
            file.close()
            raise


def files(paths: str | list[str], format: str = "text", *, pattern: str | None = None,
          batch_size: int | None = None, block_size: int = DEFAULT_BLOCK_SIZE) -> FilesSource:
    """Read every file under ``paths`` (files or directories, local or ``s3://``).

    ``batch_size`` rows per batch; by default the pipeline's choice (larger when no
    Python function sees single records). ``block_size`` bytes of a text, JSON lines
    or CSV file are read and parsed at a time, which bounds a reader's memory.
    """
    return FilesSource(paths=[paths] if isinstance(paths, str) else list(paths), fmt=format,
                       pattern=pattern, batch_size=batch_size, block_size=block_size)
