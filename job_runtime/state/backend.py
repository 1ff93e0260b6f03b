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
from typing import Any, Literal, Protocol, runtime_checkable

from cjob_checkpoint.checkpoint_storage import CheckpointStorage, StateHandle
from cjob_checkpoint.metadata import SharedStateFile

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

    def map_put(self, name: str, key_group: int, key: Any, user_key: Any, value: Any) -> None:
        """Set one entry of the map stored for ``key`` (``MapState.put``); each backend
        changes a map its own cheapest way, a snapshot still seeing the map as it was."""

    def map_remove(self, name: str, key_group: int, key: Any, user_key: Any) -> None:
        """Remove one entry, if present, of the map stored for ``key``."""

    def snapshot(self) -> AnySnapshot:
        """The synchronous part: must stay cheap (milliseconds), the rest runs later."""

    def restore(self, blobs: Iterable[bytes]) -> int:
        """Load the owned key groups from state files of any parallelism; returns keys."""

    def key_count(self) -> int: ...

    def iter_entries(self, name: str, *, key_groups: range | None = None
                     ) -> Iterator[tuple[int, Any, Any]]:
        """``(key_group, key, value)`` of every entry of state ``name`` (in
        ``key_groups`` only, if given); the caller may change the state meanwhile."""

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
