"""Reading a checkpoint's keyed state from Python, as Arrow, without running the job.

Spark's state data source reads state only from the JVM, and Flink's State Processor
API only from Java; here a checkpoint's (or a snapshot's) state is a table one call
away, for looking inside a running job, testing a pipeline's state, or preparing a
migration. The reader goes the way a restore goes: the checkpoint's ``_metadata``
names each keyed operator's state files and the key groups each holds, and every
format a restore reads is read here too:

- record state (``reduce``, ``process`` values, maps and timers, window functions,
  session windows), written by the ``hashmap`` backend (one pickled table per key
  group) or the ``rocksdb`` backend (an incremental snapshot, downloaded and read in
  key order), one row per key and state name;
- vectorised ``aggregate`` state (a key table of accumulators), one row per key;
- ``window_aggregate`` state, one row per key and open window.

State files are pickles, as for a restore: read only checkpoints you would restore.
Values whose classes the job defines need the job's code importable.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from cjob_checkpoint.checkpoint_storage import (
    METADATA_NAME,
    CheckpointStorage,
    parse_checkpoint_uri,
    read_metadata,
)
from cjob_checkpoint.metadata import CheckpointMetadata, KeyedStateHandle, OperatorDescriptor
from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.s3 import S3Config
from job_runtime.records import rows_to_arrow
from job_runtime.state.hashmap import deserialize_keyed_state
from job_runtime.state.rocksdb_format import RocksDBStateFile, is_rocksdb_state, with_shared_files
from job_runtime.state.ttl import unwrap

REDUCE_STATE = "value"
"""What a ``reduce``'s one state (stored under the operator's own uid) is called here."""


class StateReadError(ValueError):
    """A checkpoint, or an operator in it, that cannot be read as asked: one sentence."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class OperatorState:
    """A keyed operator with state in a checkpoint, as :func:`operators` lists it."""

    uid: str
    kind: str
    """``reduce``, ``process``, ``aggregate``...; empty when the checkpoint does not say."""
    key: str
    subtasks: int
    """How many state files (one per subtask that held state)."""
    size_bytes: int


@dataclasses.dataclass(frozen=True)
class _Checkpoint:
    metadata: CheckpointMetadata
    storage: CheckpointStorage


def metadata_uri(checkpoint: str) -> str:
    """The ``_metadata`` of ``checkpoint``: the file itself, or the one in its folder."""
    trimmed = checkpoint.rstrip("/")
    return trimmed if trimmed.endswith(f"/{METADATA_NAME}") else f"{trimmed}/{METADATA_NAME}"


def _open(checkpoint: str, *, s3: S3Config | None) -> _Checkpoint:
    uri = metadata_uri(checkpoint)
    try:
        location = parse_checkpoint_uri(uri)
        metadata = CheckpointMetadata.from_bytes(read_metadata(uri, s3=s3))
    except Exception as exc:
        raise StateReadError(f"cannot read the checkpoint {checkpoint}: "
                             f"{getattr(exc, 'cause', None) or exc}") from exc
    storage = CheckpointStorage(location.root, location.job_id,
                                fs=get_filesystem(uri, s3=s3))
    return _Checkpoint(metadata=metadata, storage=storage)


def _descriptors(metadata: CheckpointMetadata) -> dict[str, OperatorDescriptor]:
    return {d.uid: d for d in metadata.pipeline or ()}


def operators(checkpoint: str, *, s3: S3Config | None = None) -> list[OperatorState]:
    """The keyed operators with state in ``checkpoint`` (a ``chk-<id>`` directory or its
    ``_metadata``, of a checkpoint or a snapshot), by uid."""
    opened = _open(checkpoint, s3=s3)
    described = _descriptors(opened.metadata)
    found = []
    for uid, files in sorted(opened.metadata.operators.items()):
        if not files:
            continue
        descriptor = described.get(uid)
        found.append(OperatorState(
            uid=uid, kind=descriptor.kind if descriptor else "",
            key=descriptor.key if descriptor else "", subtasks=len(files),
            size_bytes=sum(f.handle.size_bytes for f in files)))
    return found


def read(checkpoint: str, *, operator: str, state: str | None = None,
         s3: S3Config | None = None, workdir: str | Path | None = None) -> pa.Table:
    """The keyed state of ``operator`` in ``checkpoint`` as an Arrow table (its
    ``to_pandas()`` for pandas).

    Record state has the columns ``key_group``, ``key``, ``state`` (the state's name:
    a ``process`` function's ``value_state`` / ``map_state`` name, ``__timers``,
    ``windows``...; ``value`` for a ``reduce``) and ``value``; ``state`` keeps one
    name's rows. Aggregates have ``key_group``, the key's columns and one column per
    accumulator (``count``, ``sum:<column>``...), windowed ones ``window_start`` too.
    A column whose values Arrow cannot type as one (mixed types) holds their JSON.
    ``workdir`` is where ``rocksdb`` state is downloaded to be read (a temporary
    directory by default).
    """
    opened = _open(checkpoint, s3=s3)
    files = opened.metadata.operators.get(operator)
    if not files:
        held = sorted(uid for uid, handles in opened.metadata.operators.items() if handles)
        raise StateReadError(
            f"checkpoint {opened.metadata.checkpoint_id} holds no state of operator "
            f"{operator!r}; it holds state of: {', '.join(held) or 'no operator'}")
    with tempfile.TemporaryDirectory(prefix="cjob-state-", dir=workdir) as scratch:
        payloads = list(_payloads(opened, files, workdir=Path(scratch)))
        kinds = {kind for kind, _ in payloads}
        if len(kinds) > 1:
            raise StateReadError(f"operator {operator!r} has state files of several kinds "
                                 f"({', '.join(sorted(kinds))}): not one operator's state")
        kind = kinds.pop() if kinds else "records"
        if kind == "records":
            return _record_table(operator, [row for _, rows in payloads for row in rows],
                                 state=state)
    if state is not None:
        raise StateReadError(f"operator {operator!r} keeps {kind} state, which has no "
                             f"state names: leave out the state name")
    if kind == "interval_join":
        # The records waiting to be joined, each with its stream (1 or 2).
        waiting = [t.append_column("stream", pa.array([side + 1] * t.num_rows, pa.int8()))
                   for _, chunks in payloads for side, t in chunks]
        return _concat(waiting) if waiting else pa.table({"stream": pa.array([], pa.int8())})
    if kind == "table":
        # Every subtask holds the whole table: the first one's is the table.
        first: dict[Any, Any] = payloads[0][1][0]
        return pa.Table.from_batches([rows_to_arrow(list(first.values()))])
    descriptor = _descriptors(opened.metadata).get(operator)
    key_names = _key_names(descriptor)
    tables = [table for _, chunks in payloads for table in chunks]
    if kind == "aggregate":
        return _concat([_key_table(t, key_names=key_names) for t in tables])
    return _concat([_key_table(t, key_names=key_names, window_start=start)
                    for start, t in tables])


def _payloads(opened: _Checkpoint, files: Sequence[KeyedStateHandle], *,
              workdir: Path) -> Iterator[tuple[str, list[Any]]]:
    """Per state file, its kind and its contents (rows, key tables or windows)."""
    from job_runtime.state.rocksdb import read_entries

    for found in files:
        blob = with_shared_files(opened.storage.read_state(found.handle), found.shared)
        groups = range(*found.key_groups)
        if is_rocksdb_state(blob):
            entries = read_entries(RocksDBStateFile.from_bytes(blob), storage=opened.storage,
                                   key_groups=groups, workdir=workdir)
            yield "records", [(group, name, key, value)
                              for name, group, key, value in entries]
            continue
        payload = pickle.loads(blob)
        if not isinstance(payload, dict):
            raise StateReadError(f"{found.handle.uri} is not a state file this runtime reads")
        if "windows" in payload:
            yield "window_aggregate", [(start, table)
                                       for start, table in sorted(payload["windows"].items())]
        elif "accumulators" in payload:
            yield "aggregate", [payload]
        elif "rows" in payload and "positions" in payload:
            yield "table", [payload["rows"]]
        elif "buffers" in payload:
            yield "interval_join", [(side, pa.ipc.open_stream(data).read_all())
                                    for side, data in enumerate(payload["buffers"])
                                    if data is not None]
        else:
            tables = deserialize_keyed_state(blob)
            yield "records", [(group, name, key, value)
                              for group, named in sorted(tables.items())
                              for name, entries in named.items()
                              for key, value in entries.items()]


def _state_name(operator: str, stored: str) -> str:
    if stored == operator:
        return REDUCE_STATE
    return stored.removeprefix(f"{operator}/")


def _record_table(operator: str, rows: list[tuple[int, str, Any, Any]], *,
                  state: str | None) -> pa.Table:
    named = [(group, _state_name(operator, name), key, unwrap(value))
             for group, name, key, value in rows]
    if state is not None:
        names = sorted({name for _, name, _, _ in named})
        named = [row for row in named if row[1] == state]
        if not named:
            raise StateReadError(f"operator {operator!r} has no state named {state!r}; "
                                 f"its states: {', '.join(names) or 'none'}")
    named.sort(key=lambda row: (row[0], row[1]))
    return pa.table({
        "key_group": pa.array([row[0] for row in named], type=pa.int32()),
        "key": _column([row[2] for row in named]),
        "state": pa.array([row[1] for row in named], type=pa.string()),
        "value": _column([row[3] for row in named]),
    })


def _column(values: list[Any]) -> pa.Array:
    """``values`` as one typed Arrow array, or as their JSON when Arrow cannot type them
    (their ``repr`` when JSON cannot hold them either: a map keyed by tuples)."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return pa.array([_text(v) for v in values], type=pa.string())


def _text(value: Any) -> str:
    try:
        return json.dumps(value, default=repr, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def _key_names(descriptor: OperatorDescriptor | None) -> list[str]:
    if descriptor is None or not descriptor.key or descriptor.key == "function":
        return ["key"]
    return descriptor.key.split(",")


def _key_table(payload: dict[str, Any], *, key_names: list[str],
               window_start: int | None = None) -> pa.Table:
    keys = payload["keys"]
    count = len(keys)
    columns: dict[str, pa.Array] = {
        "key_group": pa.array(np.asarray(payload["groups"][:count], dtype=np.int32))}
    values = keys.to_pylist() if isinstance(keys, pa.Array) else list(keys)
    if len(key_names) > 1 and all(isinstance(v, tuple) and len(v) == len(key_names)
                                  for v in values):
        for index, name in enumerate(key_names):
            columns[name] = _column([v[index] for v in values])
    elif isinstance(keys, pa.Array) and not isinstance(keys, pa.ChunkedArray):
        columns[key_names[0] if len(key_names) == 1 else "key"] = keys
    else:
        columns[key_names[0] if len(key_names) == 1 else "key"] = _column(values)
    if window_start is not None:
        columns["window_start"] = pa.array([window_start] * count, type=pa.int64())
    for name, accumulated in sorted(payload["accumulators"].items()):
        columns[name] = pa.array(np.asarray(accumulated[:count]))
    return pa.table(columns)


def _concat(tables: list[pa.Table]) -> pa.Table:
    if not tables:
        return pa.table({"key_group": pa.array([], type=pa.int32())})
    return pa.concat_tables(tables, promote_options="permissive")
