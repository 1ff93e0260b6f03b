"""Completed-checkpoint stores and checkpoint id counters: in-memory, file and ConfigMap.

The ConfigMap store (:mod:`job_runtime.store.configmap`) needs the ``kubernetes``
client and is imported only by the driver on Kubernetes and by the operator.
"""

from job_runtime.store.base import (
    AmbiguousWriteError,
    CheckpointIdCounter,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    Discarder,
    FencedError,
    JobOutcome,
    StoreError,
    StoreFullError,
    UnreadableCheckpointError,
)
from job_runtime.store.file import (
    CorruptPointerError,
    CorruptStoreFileError,
    FileCheckpointIdCounter,
    FileCheckpointStore,
    StoreClosedError,
    advance_attempt,
    list_checkpoints,
    read_attempt,
)
from job_runtime.store.memory import InMemoryCheckpointIdCounter, InMemoryCheckpointStore
from job_runtime.store.retention import InvalidRetentionError

__all__ = [
    "AmbiguousWriteError",
    "CheckpointIdCounter",
    "CompletedCheckpoint",
    "CompletedCheckpointStore",
    "CorruptPointerError",
    "CorruptStoreFileError",
    "Discarder",
    "FencedError",
    "FileCheckpointIdCounter",
    "FileCheckpointStore",
    "InMemoryCheckpointIdCounter",
    "InMemoryCheckpointStore",
    "InvalidRetentionError",
    "JobOutcome",
    "StoreClosedError",
    "StoreError",
    "StoreFullError",
    "UnreadableCheckpointError",
    "advance_attempt",
    "list_checkpoints",
    "read_attempt",
]
