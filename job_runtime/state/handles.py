"""State handles that a ``process`` function uses for the key of the current record,
and the timers it registers for that key."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, TypeVar

from job_runtime.durations import duration_ms
from job_runtime.errors import PipelineDefinitionError
from job_runtime.state.backend import KeyedStateBackend
from job_runtime.state.timers import TimeDomain, TimerService
from job_runtime.state.ttl import Clock, Expiring, TtlSweeper, live, unwrap, wall_clock_ms
from job_runtime.watermarks import MIN_WATERMARK, datetime_ms


class _KeyScope:
    """Which key (and key group) the handles currently address; set per record."""

    __slots__ = ("key", "key_group")

    def __init__(self) -> None:
        self.key: Any = None
        self.key_group = 0


class ValueState:
    """One value per key; with a TTL, gone ``ttl`` ms (processing time) after its
    last update."""

    def __init__(self, *, backend: KeyedStateBackend, name: str, scope: _KeyScope,
                 ttl: int | None = None, clock: Clock = wall_clock_ms) -> None:
        self._backend = backend
        self._name = name
        self._scope = scope
        self._ttl = ttl
        self._clock = clock

    def value(self, default: Any = None) -> Any:
        scope = self._scope
        stored = self._backend.get(self._name, scope.key_group, scope.key, default)
        if self._ttl is None and not isinstance(stored, Expiring):
            return stored
        if not live(stored, self._clock()):
            self._backend.delete(self._name, scope.key_group, scope.key)
            return default
        return unwrap(stored)

    def update(self, value: Any) -> None:
        if self._ttl is not None:
            value = Expiring(value, self._clock() + self._ttl)
        self._backend.put(self._name, self._scope.key_group, self._scope.key, value)

    def clear(self) -> None:
        self._backend.delete(self._name, self._scope.key_group, self._scope.key)


class MapState:
    """A map per key, stored as one dict per key; with a TTL, each entry is gone
    ``ttl`` ms (processing time) after it was last put.

    Puts and removes go to the backend, which changes the map its cheapest way:
    ``hashmap`` in place once it copied the map after the last snapshot (a put is
    O(1), not a copy of the whole map); ``rocksdb`` reads, changes and writes the
    map back. A snapshot still sees the map as it was.
    """

    def __init__(self, *, backend: KeyedStateBackend, name: str, scope: _KeyScope,
                 ttl: int | None = None, clock: Clock = wall_clock_ms) -> None:
        self._backend = backend
        self._name = name
        self._scope = scope
        self._ttl = ttl
        self._clock = clock

    def _current(self) -> dict[Any, Any]:
        value: dict[Any, Any] = self._backend.get(self._name, self._scope.key_group,
                                                  self._scope.key, {})
        return value

    def _live(self) -> dict[Any, Any]:
        """The key's entries, unwrapped; expired ones are removed on the way."""
        current = self._current()
        if self._ttl is None and not any(isinstance(v, Expiring) for v in current.values()):
            return current
        now = self._clock()
        entries = {}
        for user_key, stored in list(current.items()):
            if live(stored, now):
                entries[user_key] = unwrap(stored)
            else:
                self.remove(user_key)
        return entries

    def get(self, user_key: Any, default: Any = None) -> Any:
        stored = self._current().get(user_key, _MISSING)
        if stored is _MISSING:
            return default
        if not live(stored, self._clock()):
            self.remove(user_key)
            return default
        return unwrap(stored)

    def put(self, user_key: Any, value: Any) -> None:
        if self._ttl is not None:
            value = Expiring(value, self._clock() + self._ttl)
        self._backend.map_put(self._name, self._scope.key_group, self._scope.key, user_key,
                              value)

    def remove(self, user_key: Any) -> None:
        self._backend.map_remove(self._name, self._scope.key_group, self._scope.key, user_key)

    def contains(self, user_key: Any) -> bool:
        return self.get(user_key, _MISSING) is not _MISSING

    def keys(self) -> Iterator[Any]:
        return iter(list(self._live()))

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._live().items()))

    def clear(self) -> None:
        self._backend.delete(self._name, self._scope.key_group, self._scope.key)


_MISSING = object()
_Handle = TypeVar("_Handle", ValueState, MapState)


def timestamp_ms(value: int | datetime, *, what: str) -> int:
    """A timer's time as milliseconds since the epoch (an int, or a datetime)."""
    if isinstance(value, datetime):
        return datetime_ms(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"{what} needs milliseconds since the epoch (int) or a datetime, "
                    f"got {type(value).__name__}")


class Timers:
    """``ctx.timers``: timers of the current key; ``on_timer`` runs when one is due."""

    def __init__(self, *, service: TimerService | None, scope: _KeyScope,
                 event_time: bool) -> None:
        self._service = service
        self._scope = scope
        self._event_time = event_time

    def _call(self, domain: TimeDomain, when: int | datetime, *, delete: bool) -> None:
        what = f"ctx.timers.{'delete' if delete else 'register'}_{domain.value}"
        if self._service is None:
            raise TypeError(f"{what}: timers need process(fn, on_timer=...), which they call")
        if domain == TimeDomain.EVENT_TIME and not self._event_time:
            raise TypeError(f"{what}: event-time timers need a source with watermarks=")
        ts = timestamp_ms(when, what=what)
        scope = self._scope
        if delete:
            self._service.delete(domain, ts, key=scope.key, key_group=scope.key_group)
        else:
            self._service.register(domain, ts, key=scope.key, key_group=scope.key_group)

    def register_event_time(self, when: int | datetime) -> None:
        """Call ``on_timer`` once the watermark reaches ``when`` (one call per key and
        time, however often it is registered)."""
        self._call(TimeDomain.EVENT_TIME, when, delete=False)

    def register_processing_time(self, when: int | datetime) -> None:
        """Call ``on_timer`` once the wall clock reaches ``when``."""
        self._call(TimeDomain.PROCESSING_TIME, when, delete=False)

    def delete_event_time(self, when: int | datetime) -> None:
        self._call(TimeDomain.EVENT_TIME, when, delete=True)

    def delete_processing_time(self, when: int | datetime) -> None:
        self._call(TimeDomain.PROCESSING_TIME, when, delete=True)

    def registered(self) -> list[tuple[TimeDomain, int]]:
        """The current key's timers, earliest first."""
        if self._service is None:
            return []
        return self._service.registered(key=self._scope.key, key_group=self._scope.key_group)


class ProcessContext:
    """What a ``process(fn)`` function (and its ``on_timer``) receives besides the record."""

    def __init__(self, *, backend: KeyedStateBackend, operator: str,
                 timers: TimerService | None = None, event_time: bool = False,
                 clock: Clock = wall_clock_ms,
                 output: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self._backend = backend
        self._operator = operator
        self._output = output
        self._scope = _KeyScope()
        self._clock = clock
        self._values: dict[str, ValueState] = {}
        self._maps: dict[str, MapState] = {}
        self._ttls: dict[str, int | None] = {}
        self.sweeper = TtlSweeper(backend=backend, clock=clock)
        self.timers = Timers(service=timers, scope=self._scope, event_time=event_time)
        self.current_watermark = MIN_WATERMARK
        self.input: int | None = None
        """In a connected stream's function: 0 for a record of the first stream, 1 for
        one of the second (``None`` elsewhere)."""
        """Event time (ms) this subtask reached; ``MIN_WATERMARK`` before the first."""
        self.timestamp: int | None = None
        """The current record's event time in ms (or the due timer's time in
        ``on_timer``); ``None`` without watermarks on the source."""
        self.time_domain: TimeDomain | None = None
        """In ``on_timer``: which clock the due timer waited for."""

    @property
    def key(self) -> Any:
        return self._scope.key

    def output(self, tag: str, record: dict[str, Any]) -> None:
        """Route ``record`` to the side output ``tag`` instead of (or besides) the main
        output: ``stream.side_output(tag)`` reads it, in the same checkpoint interval
        as the main output. A tag no branch reads is dropped."""
        if not isinstance(tag, str) or not tag:
            raise PipelineDefinitionError(
                problem=f"ctx.output() needs a tag (a non-empty string), got {tag!r}")
        if not isinstance(record, dict):
            raise PipelineDefinitionError(
                problem=f"ctx.output({tag!r}, ...) needs a record (a dict), got "
                        f"{type(record).__name__}")
        if self._output is None:
            raise PipelineDefinitionError(
                problem=f"operator {self._operator} has no side outputs")
        self._output(tag, record)

    @property
    def current_processing_time(self) -> int:
        return self._clock()

    def set_key(self, key: Any, key_group: int) -> None:
        self._scope.key = key
        self._scope.key_group = key_group

    def _ttl(self, name: str, ttl: str | float | None) -> int | None:
        millis = None if ttl is None else duration_ms(ttl, what=f"state {name!r} ttl",
                                                       allow_zero=False)
        known = self._ttls.setdefault(name, millis)
        if known != millis:
            raise PipelineDefinitionError(
                problem=f"state {name!r} is asked for with two TTLs ({known} ms and "
                        f"{millis} ms): give one")
        return millis

    def value_state(self, name: str, *, ttl: str | float | None = None) -> ValueState:
        """The key's value of state ``name``; ``ttl`` (``"1h"``): gone that long after
        its last update."""
        # Asked for once per record by most functions: made once per name.
        handle = self._values.get(name)
        if handle is None:
            handle = self._values[name] = self._handle(ValueState, name, ttl)
        return handle

    def map_state(self, name: str, *, ttl: str | float | None = None) -> MapState:
        """The key's map of state ``name``; ``ttl``: each entry gone that long after
        it was put."""
        handle = self._maps.get(name)
        if handle is None:
            handle = self._maps[name] = self._handle(MapState, name, ttl)
        return handle

    def _handle(self, kind: type[_Handle], name: str, ttl: str | float | None) -> _Handle:
        millis = self._ttl(name, ttl)
        full = f"{self._operator}/{name}"
        if millis is not None:
            self.sweeper.track(full, is_map=kind is MapState)
        return kind(backend=self._backend, name=full, scope=self._scope, ttl=millis,
                    clock=self._clock)
