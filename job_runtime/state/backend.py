"""What a keyed operator needs from a state backend, and how a job chooses one.

Two backends implement :class:`KeyedStateBackend`: ``hashmap`` keeps every key
in memory and writes a full copy per checkpoint; ``rocksdb`` keeps state on
local disk (so it may be larger than memory) and uploads only the files that
are new since the last completed checkpoint. Operators and state handles speak
to the Protocol only, so the choice is one line of the job's spec
(``spec.state.backend``) and one flag of the runtime (``--state-backend``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from job_runtime.checkpoint.metadata import SharedStateFile
from job_runtime.storage.checkpoint_storage import CheckpointStorage, StateHandle

BackendKind = Literal["hashmap", "rocksdb"]
BACKEND_KINDS: tuple[BackendKind, ...] = ("hashmap", "rocksdb")


class StateSnapshot(Protocol):
    """The synchronous part of a full snapshot; ``serialize`` runs in the uploader."""

    def serialize(self) -> bytes: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class UploadedState:
    """What an incremental snapshot wrote: its own file and the shared files it uses."""

    handle: StateHandle
    shared: tuple[SharedStateFile, ...]
    uploaded_bytes: int
    """Bytes actually written for this checkpoint (reused shared files cost nothing)."""


@runtime_checkable
class IncrementalSnapshot(Protocol):
    """A snapshot that writes itself: new files go to the job's shared directory once."""

    def upload(self, *, storage: CheckpointStorage, checkpoint_id: int, operator: str,
               subtask: int) -> UploadedState: ...


AnySnapshot = StateSnapshot | IncrementalSnapshot
"""What a keyed operator's synchronous snapshot returns to the uploader."""


class KeyedStateBackend(Protocol):
    """Keyed state of the key groups one subtask owns, by state name, key group and key."""

    key_groups: range

    def get(self, name: str, key_group: int, key: Any, default: Any = None) -> Any: ...

    def put(self, name: str, key_group: int, key: Any, value: Any) -> None: ...

    def delete(self, name: str, key_group: int, key: Any) -> None: ...

    def snapshot(self) -> AnySnapshot:
        """The synchronous part: must stay cheap (milliseconds), the rest runs later."""

    def restore(self, blobs: Iterable[bytes]) -> int:
        """Load the owned key groups from state files of any parallelism; returns keys."""

    def key_count(self) -> int: ...

    def iter_entries(self, name: str) -> Iterator[tuple[int, Any, Any]]:
        """``(key_group, key, value)`` of every entry of state ``name``."""

    def notify_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed: its files may be reused."""

    def close(self) -> None: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class StateBackendSettings:
    """The job's choice of backend, and what the ``rocksdb`` backend needs besides."""

    kind: BackendKind = "hashmap"
    local_dir: str = ""
    """Where ``rocksdb`` keeps its working files; empty: Spark's scratch directory."""
    storage: CheckpointStorage | None = None
    """Where restored shared files are read from (``rocksdb`` only)."""


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
    from job_runtime.state.hashmap import HashMapStateBackend

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
    from job_runtime.state.rocksdb_format import RocksDBStateFile, is_rocksdb_state

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
