"""Creating the backend a job chose, and restoring into it whatever backend wrote the state.

Kept apart from :mod:`job_runtime.state.backend` (the Protocol and the data the
backends share) because it knows both implementations, while the ``rocksdb``
backend itself stands on the Protocol module: one direction, no cycle.
``rocksdict`` is imported only when a job chooses ``rocksdb``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from job_runtime.state.backend import (
    BACKEND_KINDS,
    KeyedStateBackend,
    StateBackendSettings,
)
from job_runtime.state.hashmap import HashMapStateBackend
from job_runtime.state.rocksdb_format import RocksDBStateFile, is_rocksdb_state


def create_backend(settings: StateBackendSettings, *, key_groups: range, operator: str,
                   subtask: int) -> KeyedStateBackend:
    """A fresh backend for ``operator``'s subtask ``subtask``."""
    if settings.kind == "rocksdb":
        from job_runtime.state.rocksdb import RocksDBStateBackend

        return RocksDBStateBackend(key_groups=key_groups, operator=operator, subtask=subtask,
                                   local_dir=settings.local_dir, storage=settings.storage)
    if settings.kind != "hashmap":
        raise ValueError(f"unknown state backend {settings.kind!r} "
                         f"(expected one of {', '.join(BACKEND_KINDS)})")
    return HashMapStateBackend(key_groups=key_groups)


def restore_keyed_state(backend: KeyedStateBackend, blobs: Iterable[bytes], *,
                        settings: StateBackendSettings) -> int:
    """Restore ``blobs`` into ``backend``, whichever backend wrote them.

    A job may change ``spec.state.backend`` and restart from its latest checkpoint:
    ``rocksdb`` loads ``hashmap`` snapshots itself, and here a ``hashmap`` backend
    gets the owned entries of ``rocksdb`` snapshots read out of their databases.
    """
    if settings.kind == "rocksdb":
        return backend.restore(blobs)
    full: list[bytes] = []
    incremental: list[RocksDBStateFile] = []
    for blob in blobs:
        if is_rocksdb_state(blob):
            incremental.append(RocksDBStateFile.from_bytes(blob))
        else:
            full.append(blob)
    restored = backend.restore(full)
    if not incremental:
        return restored
    from job_runtime.state.rocksdb import default_local_dir, read_entries

    if settings.storage is None:
        raise ValueError("restoring a rocksdb checkpoint needs its checkpoint storage")
    workdir = Path(settings.local_dir) if settings.local_dir else default_local_dir()
    workdir.mkdir(parents=True, exist_ok=True)
    groups = backend.key_groups
    for state in incremental:
        if not (state.key_groups[0] < groups.stop and groups.start < state.key_groups[1]):
            continue
        for name, key_group, key, value in read_entries(state, storage=settings.storage,
                                                        key_groups=groups, workdir=workdir):
            backend.put(name, key_group, key, value)
            restored += 1
    return restored
