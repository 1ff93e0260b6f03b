"""``files``: lines, JSON lines, CSV or Parquet from local paths or ``s3://`` prefixes.

Each file is one split. The position is a byte offset for line formats and a row
offset for Parquet, so a restore continues exactly after the last record that
the checkpoint covered.
"""

from __future__ import annotations

import fnmatch
import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from cjob_checkpoint.storage.factory import get_filesystem
from job_runtime.errors import PipelineDefinitionError
from job_runtime.records import Batch, Record
from job_runtime.sources.base import Source, SourceContext, Split, SplitReader

FORMATS = ("text", "jsonl", "csv", "parquet")


def _is_hidden(uri: str) -> bool:
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    return name.startswith((".", "_"))


class _LineReader(SplitReader):
    def __init__(self, *, data: bytes, offset: int, fmt: str, batch_size: int) -> None:
        self._data = data
        self._offset = offset
        self._fmt = fmt
        self._batch_size = batch_size

    def read_batch(self) -> Batch | None:
        if self._offset >= len(self._data):
            return None
        rows: list[Record] = []
        data = self._data
        pos = self._offset
        while pos < len(data) and len(rows) < self._batch_size:
            end = data.find(b"\n", pos)
            if end < 0:
                end = len(data)
            line = data[pos:end].decode("utf-8").rstrip("\r")
            pos = end + 1
            if self._fmt == "jsonl":
                if line.strip():
                    rows.append(json.loads(line))
            else:
                rows.append({"line": line})
        self._offset = min(pos, len(data))
        return Batch(rows=rows)

    def position(self) -> int:
        return self._offset


class _TableReader(SplitReader):
    def __init__(self, *, table: pa.Table, offset: int, batch_size: int) -> None:
        self._table = table
        self._offset = offset
        self._batch_size = batch_size

    def read_batch(self) -> Batch | None:
        if self._offset >= self._table.num_rows:
            return None
        chunk = self._table.slice(self._offset, self._batch_size)
        self._offset += chunk.num_rows
        return Batch.of(chunk)

    def position(self) -> int:
        return self._offset


class FilesSource(Source):
    name = "files"

    def __init__(self, *, paths: list[str], fmt: str, pattern: str | None,
                 batch_size: int) -> None:
        if fmt not in FORMATS:
            raise PipelineDefinitionError(
                problem=f"files source format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        if not paths:
            raise PipelineDefinitionError(problem="files source needs at least one path")
        self.paths = paths
        self.fmt = fmt
        self.pattern = pattern
        self.batch_size = batch_size

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
        data = get_filesystem(uri, s3=context.s3).read_bytes(uri)
        offset = int(position or 0)
        if self.fmt in ("text", "jsonl"):
            return _LineReader(data=data, offset=offset, fmt=self.fmt, batch_size=self.batch_size)
        if self.fmt == "csv":
            table = pacsv.read_csv(io.BytesIO(data))
        else:
            table = pq.read_table(io.BytesIO(data))
        return _TableReader(table=table, offset=offset, batch_size=self.batch_size)


def files(paths: str | list[str], format: str = "text", *, pattern: str | None = None,
          batch_size: int = 4096) -> FilesSource:
    """Read every file under ``paths`` (files or directories, local or ``s3://``)."""
    return FilesSource(paths=[paths] if isinstance(paths, str) else list(paths), fmt=format,
                       pattern=pattern, batch_size=batch_size)
