"""State handles that a ``process`` function uses for the key of the current record."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from job_runtime.state.backend import KeyedStateBackend


class _KeyScope:
    """Which key (and key group) the handles currently address; set per record."""

    __slots__ = ("key", "key_group")

    def __init__(self) -> None:
        self.key: Any = None
        self.key_group = 0


class ValueState:
    """One value per key."""

    def __init__(self, *, backend: KeyedStateBackend, name: str, scope: _KeyScope) -> None:
        self._backend = backend
        self._name = name
        self._scope = scope

    def value(self, default: Any = None) -> Any:
        return self._backend.get(self._name, self._scope.key_group, self._scope.key, default)

    def update(self, value: Any) -> None:
        self._backend.put(self._name, self._scope.key_group, self._scope.key, value)

    def clear(self) -> None:
        self._backend.delete(self._name, self._scope.key_group, self._scope.key)


class MapState:
    """A map per key, stored as one dict per key.

    Puts and removes go to the backend, which changes the map its cheapest way:
    ``hashmap`` in place once it copied the map after the last snapshot (a put is
    O(1), not a copy of the whole map); ``rocksdb`` reads, changes and writes the
    map back. A snapshot still sees the map as it was.
    """

    def __init__(self, *, backend: KeyedStateBackend, name: str, scope: _KeyScope) -> None:
        self._backend = backend
        self._name = name
        self._scope = scope

    def _current(self) -> dict[Any, Any]:
        value: dict[Any, Any] = self._backend.get(self._name, self._scope.key_group,
                                                  self._scope.key, {})
        return value

    def get(self, user_key: Any, default: Any = None) -> Any:
        return self._current().get(user_key, default)

    def put(self, user_key: Any, value: Any) -> None:
        self._backend.map_put(self._name, self._scope.key_group, self._scope.key, user_key,
                              value)

    def remove(self, user_key: Any) -> None:
        self._backend.map_remove(self._name, self._scope.key_group, self._scope.key, user_key)

    def contains(self, user_key: Any) -> bool:
        return user_key in self._current()

    def keys(self) -> Iterator[Any]:
        return iter(list(self._current()))

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._current().items()))

    def clear(self) -> None:
        self._backend.delete(self._name, self._scope.key_group, self._scope.key)


class ProcessContext:
    """What a ``process(fn)`` function receives besides the record."""

    def __init__(self, *, backend: KeyedStateBackend, operator: str) -> None:
        self._backend = backend
        self._operator = operator
        self._scope = _KeyScope()
        self._values: dict[str, ValueState] = {}
        self._maps: dict[str, MapState] = {}

    @property
    def key(self) -> Any:
        return self._scope.key

    def set_key(self, key: Any, key_group: int) -> None:
        self._scope.key = key
        self._scope.key_group = key_group

    def value_state(self, name: str) -> ValueState:
        # Asked for once per record by most functions: made once per name.
        handle = self._values.get(name)
        if handle is None:
            handle = ValueState(backend=self._backend, name=f"{self._operator}/{name}",
                                scope=self._scope)
            self._values[name] = handle
        return handle

    def map_state(self, name: str) -> MapState:
        handle = self._maps.get(name)
        if handle is None:
            handle = MapState(backend=self._backend, name=f"{self._operator}/{name}",
                              scope=self._scope)
            self._maps[name] = handle
        return handle
