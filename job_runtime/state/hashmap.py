"""The ``hashmap`` state backend: keyed state in memory, snapshotted copy-on-write.

State is kept per key group: ``tables[name][key_group]`` is a plain dict from key
to value. A snapshot must not stop the task for longer than a few milliseconds,
so it copies nothing: it takes references to the current dicts and marks every
key group as *shared*. The next write to a shared key group copies that one dict
first. The cost of a snapshot is therefore proportional to the number of key
groups (128 by default), not to the number of keys, and the copying that a write
may need is spread over the following records. Serialisation of the snapshotted
dicts happens later, in a background thread, while the task goes on.

Values must be treated as immutable by user code (replace them with
``update``/``put``): a value mutated in place after a snapshot would leak into it.
The one exception is the runtime's own ``MapState``: :meth:`HashMapStateBackend.owned_map`
hands out a key's map for in-place changes once that map was copied since the
key group's last snapshot, so a put costs O(1) and a map is copied at most once
per checkpoint interval, not on every put.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterable, Iterator
from typing import Any

_FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class KeyedStateSnapshot:
    """References to the state as it was when the snapshot was taken."""

    groups: dict[int, dict[str, dict[Any, Any]]]

    def serialize(self) -> bytes:
        """Runs in the background thread: the dicts are frozen by copy-on-write."""
        payload = {"version": _FORMAT_VERSION, "groups": self.groups}
        return pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)

    @property
    def key_groups(self) -> list[int]:
        return sorted(self.groups)

    def key_count(self) -> int:
        return sum(len(t) for g in self.groups.values() for t in g.values())


def deserialize_keyed_state(data: bytes) -> dict[int, dict[str, dict[Any, Any]]]:
    payload = pickle.loads(data)
    if not isinstance(payload, dict) or payload.get("version") != _FORMAT_VERSION:
        raise ValueError("not a keyed state file of a known version")
    groups: dict[int, dict[str, dict[Any, Any]]] = payload["groups"]
    return groups


class HashMapStateBackend:
    """In-memory keyed state for the key groups one subtask owns."""

    def __init__(self, *, key_groups: range) -> None:
        self.key_groups = key_groups
        self._offset = key_groups.start
        n = len(key_groups)
        self._tables: dict[str, list[dict[Any, Any]]] = {}
        self._shared: dict[str, list[bool]] = {}
        # Per key group, the keys whose value was made by ``owned_map`` after the
        # group's last snapshot: nothing else holds those values, so they may change
        # in place. A set is emptied when its group is copied (the first write after
        # a snapshot), never by the snapshot itself, which must stay O(key groups).
        self._owned: dict[str, list[set[Any]]] = {}
        self._n = n

    def _table(self, name: str) -> list[dict[Any, Any]]:
        table = self._tables.get(name)
        if table is None:
            table = [{} for _ in range(self._n)]
            self._tables[name] = table
            self._shared[name] = [False] * self._n
            self._owned[name] = [set() for _ in range(self._n)]
        return table

    def get(self, name: str, key_group: int, key: Any, default: Any = None) -> Any:
        table = self._tables.get(name)
        if table is None:
            return default
        return table[key_group - self._offset].get(key, default)

    def writable(self, name: str, key_group: int) -> dict[Any, Any]:
        """The dict of one key group, copied first if a snapshot still shares it."""
        table = self._table(name)
        i = key_group - self._offset
        shared = self._shared[name]
        if shared[i]:
            table[i] = dict(table[i])
            shared[i] = False
            self._owned[name][i] = set()
        return table[i]

    def owned_map(self, name: str, key_group: int, key: Any) -> dict[Any, Any]:
        """The map stored for ``key``, safe to change in place.

        A map that a snapshot may still reference (any map not made here since the
        key group's last snapshot) is copied first, so the copy happens at most once
        per key and checkpoint interval; a missing map is created empty.
        """
        table = self.writable(name, key_group)
        owned = self._owned[name][key_group - self._offset]
        if key in owned:
            value: dict[Any, Any] = table[key]
            return value
        current = table.get(key)
        fresh: dict[Any, Any] = {} if current is None else dict(current)
        table[key] = fresh
        owned.add(key)
        return fresh

    def readable(self, name: str, key_group: int) -> dict[Any, Any]:
        return self._table(name)[key_group - self._offset]

    def put(self, name: str, key_group: int, key: Any, value: Any) -> None:
        # The per-record path of ``ValueState.update``: the common case (the group is
        # not shared with a snapshot, no map of it is owned) costs two list lookups.
        i = key_group - self._offset
        shared = self._shared.get(name)
        if shared is None or shared[i]:
            self.writable(name, key_group)[key] = value
        else:
            self._tables[name][i][key] = value
        owned = self._owned[name][i]
        if owned:
            # The caller may keep ``value``: it is no longer the runtime's own copy.
            owned.discard(key)

    def delete(self, name: str, key_group: int, key: Any) -> None:
        self.writable(name, key_group).pop(key, None)
        self._owned[name][key_group - self._offset].discard(key)

    def map_put(self, name: str, key_group: int, key: Any, user_key: Any, value: Any) -> None:
        self.owned_map(name, key_group, key)[user_key] = value

    def map_remove(self, name: str, key_group: int, key: Any, user_key: Any) -> None:
        current = self.get(name, key_group, key)
        if current is not None and user_key in current:
            del self.owned_map(name, key_group, key)[user_key]

    def snapshot(self) -> KeyedStateSnapshot:
        """The synchronous part: references and flags only, no copies."""
        groups: dict[int, dict[str, dict[Any, Any]]] = {}
        for name, table in self._tables.items():
            shared = self._shared[name]
            for i, entries in enumerate(table):
                if entries:
                    groups.setdefault(i + self._offset, {})[name] = entries
                    shared[i] = True
        return KeyedStateSnapshot(groups=groups)

    def restore(self, blobs: Iterable[bytes]) -> int:
        """Load the key groups this subtask owns from snapshots of any parallelism."""
        restored = 0
        for blob in blobs:
            for key_group, tables in deserialize_keyed_state(blob).items():
                if key_group not in self.key_groups:
                    continue
                for name, entries in tables.items():
                    self.writable(name, key_group).update(entries)
                    restored += len(entries)
        return restored

    def key_count(self) -> int:
        return sum(len(d) for table in self._tables.values() for d in table)

    def iter_entries(self, name: str, *, key_groups: range | None = None
                     ) -> Iterator[tuple[int, Any, Any]]:
        table = self._tables.get(name)
        if table is None:
            return
        for key_group in key_groups if key_groups is not None else self.key_groups:
            # A list: the caller may change the group while going through it.
            for key, value in list(table[key_group - self._offset].items()):
                yield key_group, key, value

    def notify_complete(self, checkpoint_id: int) -> None:
        """Nothing to do: every snapshot is a full copy."""

    def close(self) -> None:
        """Nothing to release: the dicts go with the backend."""
