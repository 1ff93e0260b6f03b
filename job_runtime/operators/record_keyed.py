"""The shared part of the keyed operators that take one record at a time (``reduce``,
``process``, session windows): their state lives in a :class:`KeyedStateBackend`
(``hashmap`` or ``rocksdb``), snapshotted and restored by it at any parallelism.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from job_runtime.operators.keyed_operator import KeyedOperator
from job_runtime.records import (
    Batch,
    extract_keys,
    key_array,
    key_group_of,
    key_groups_of_array,
)
from job_runtime.state.backend import AnySnapshot
from job_runtime.state.backends import create_backend, restore_keyed_state


class RecordKeyedOperator(KeyedOperator):
    """Keyed state in the job's backend, one record at a time."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.backend = create_backend(self.state, key_groups=self.key_groups,
                                      operator=self.op.uid, subtask=self.subtask)

    def _keys(self, batch: Batch) -> tuple[list[Any], list[int]]:
        """The key of every record and its key group, the groups vectorised for keys
        that are columns (a composite key's: the tuple of its columns' values)."""
        key = self.op.key.key
        if not callable(key) and batch.has_arrow:
            column = key_array(batch.arrow, key)
            groups = key_groups_of_array(column, self.max_parallelism).tolist()
            return extract_keys(batch, key), groups
        keys = extract_keys(batch, key)
        mp = self.max_parallelism
        return keys, [key_group_of(k, mp) for k in keys]

    def snapshot(self) -> AnySnapshot:
        return self.backend.snapshot()

    def restore(self, blobs: Iterable[bytes]) -> int:
        return restore_keyed_state(self.backend, blobs, settings=self.state)

    def key_count(self) -> int:
        return self.backend.key_count()

    def notify_complete(self, checkpoint_id: int) -> None:
        self.backend.notify_complete(checkpoint_id)
