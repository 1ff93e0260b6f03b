"""Writing keyed state from a table: a snapshot a job can start from.

State that exists outside a job (a migration from another system, a backfill computed
in batch, a correction) becomes a job's starting point as a snapshot: one keyed
operator's state, one row per key, written as the ``hashmap`` backend writes it (both
backends restore it, at any parallelism), with a ``_metadata`` marked as a snapshot's.
A job restores it with ``spec.restore.from: <the path this returns>`` (on a cluster, the
path must be one its driver can read); a snapshot needs no ``allowForeignJob``. The
job's sources have no position in it, so they start where their ``start`` says; the
state must be keyed by the job's own ``maxParallelism``.

The table gives the keyed operator's state as the runtime keeps it:

- a ``reduce`` (``state="value"``, the default): each row is the running record of its
  key, whole, the value the reduce function is given next;
- a ``process`` function's ``value_state(NAME)`` (``state=NAME``): the ``value``
  column is the key's value.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from cjob_checkpoint.checkpoint_storage import CheckpointStorage, ensure_safe_segment
from cjob_checkpoint.metadata import CheckpointMetadata, KeyedStateHandle, SnapshotOrigin
from cjob_checkpoint.storage.errors import InvalidCheckpointPathError
from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.s3 import S3Config
from job_runtime.records import key_group_of, key_of
from job_runtime.state.checkpoint_reader import REDUCE_STATE
from job_runtime.state.hashmap import HashMapStateBackend

BOOTSTRAP_CHECKPOINT_ID = 1
"""A written snapshot holds one checkpoint; its id only names its directory."""
DEFAULT_MAX_PARALLELISM = 128


class StateWriteError(ValueError):
    """A table that cannot be written as the state asked for: one sentence."""


def write(table: Any, *, target: str, name: str, operator: str, key: str | Sequence[str],
          state: str = REDUCE_STATE, value: str = "value",
          max_parallelism: int = DEFAULT_MAX_PARALLELISM,
          s3: S3Config | None = None) -> str:
    """Write ``table`` (Arrow, or pandas) as the state of ``operator`` in a snapshot
    named ``name`` under ``target``; returns its ``_metadata`` path, for
    ``spec.restore.from``.

    ``key`` is the column (or columns) the job keys the operator by, as in its
    ``key_by``. The snapshot lies in ``<target>/<name>-bootstrap/chk-1/``.
    """
    arrow = table if isinstance(table, pa.Table) else pa.Table.from_pandas(
        table, preserve_index=False)
    columns = [key] if isinstance(key, str) else list(key)
    missing = [c for c in columns if c not in arrow.column_names]
    if state != REDUCE_STATE and value not in arrow.column_names:
        missing.append(value)
    if missing:
        raise StateWriteError(f"the table has no column {', '.join(map(repr, missing))} "
                              f"(it has {', '.join(arrow.column_names)})")
    for text, what in ((name, "the snapshot's name"), (operator, "the operator's name")):
        try:
            ensure_safe_segment(text, what=what)
        except InvalidCheckpointPathError as exc:
            raise StateWriteError(f"{what} {text!r}: {exc.cause}") from None
    key_spec: str | tuple[str, ...] = columns[0] if len(columns) == 1 else tuple(columns)
    stored = operator if state == REDUCE_STATE else f"{operator}/{state}"
    backend = HashMapStateBackend(key_groups=range(max_parallelism))
    seen: set[Any] = set()
    for row in arrow.to_pylist():
        record_key = key_of(row, key_spec)
        if record_key in seen:
            raise StateWriteError(f"key {record_key!r} has two rows: a key holds one value")
        seen.add(record_key)
        backend.put(stored, key_group_of(record_key, max_parallelism), record_key,
                    row if state == REDUCE_STATE else row[value])
    job_id = f"{name}-bootstrap"
    storage = CheckpointStorage(target, job_id, fs=get_filesystem(target, s3=s3))
    handle = storage.write_state(BOOTSTRAP_CHECKPOINT_ID, operator, 0,
                                 backend.snapshot().serialize())
    now = time.time()
    metadata = CheckpointMetadata(
        job=job_id, checkpoint_id=BOOTSTRAP_CHECKPOINT_ID, timestamp=now, final=False,
        attempt=0, parallelism=1, max_parallelism=max_parallelism,
        operators={operator: (KeyedStateHandle(subtask=0, handle=handle,
                                                key_groups=(0, max_parallelism)),)},
        snapshot=SnapshotOrigin(name=name, source=f"written from a table of "
                                                  f"{arrow.num_rows} rows", taken_at=now))
    return storage.write_metadata(BOOTSTRAP_CHECKPOINT_ID, metadata.to_bytes())
