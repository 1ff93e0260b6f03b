"""Completed-checkpoint stores and checkpoint id counters: in-memory, file and ConfigMap.

The ConfigMap store (:mod:`cjob_checkpoint.store.configmap`) needs the ``kubernetes``
client and is imported only by the driver on Kubernetes and by the operator.
"""

from cjob_checkpoint.store.completed_store import (
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
from cjob_checkpoint.store.file import (
    CorruptPointerError,
    CorruptStoreFileError,
    FileCheckpointIdCounter,
    FileCheckpointStore,
    StoreClosedError,
    advance_attempt,
    list_checkpoints,
    read_attempt,
)
from cjob_checkpoint.store.memory import InMemoryCheckpointIdCounter, InMemoryCheckpointStore
from cjob_checkpoint.store.retention import InvalidRetentionError

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
