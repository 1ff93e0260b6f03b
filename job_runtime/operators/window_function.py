"""``key_by(k).window(w).reduce(fn)`` and ``.process(fn)``: a Python function per key
and tumbling or sliding event-time window.

**Why record by record.** ``window(w).aggregate(...)`` folds named columns with numpy
and partially aggregates before the exchange. A user function cannot be split that
way: ``reduce`` folds records in the order they come, and ``process`` sees all of a
window's records at once. So this operator takes the records themselves, one key at
a time, and nothing is combined ahead of it.

**State.** A key's open windows are one value of keyed state (``<operator>/windows``):
a dict from window start to ``(fired, contents)``, ``contents`` being the reduced
record (``reduce``) or the window's records in arrival order (``process``: a tuple of
chunks, one per batch that added records). A batch reads and writes it once per key, and the dict is replaced,
never changed in place (nor are the records in it: ``reduce``'s function gets a
copy of the accumulated record, ``process``'s copies of the records), so both
backends keep it as any keyed state: copy-on-write snapshots with ``hashmap``,
incremental checkpoints with ``rocksdb``, restores at any parallelism with each key
on the subtask of its key group.

**Timers.** A window ``[start, end)`` fires when the watermark reaches its last
millisecond, ``end - 1``: ``reduce`` emits the reduced record with ``window_start``
and ``window_end`` (the event-time column's type: ms, or a UTC ``datetime``),
``process`` emits what ``fn(key, Window(start, end), records)`` returns. The window
is dropped once the watermark reaches ``end - 1 + allowed_lateness``. Both are
event-time timers of the key, in the key group of the window, so they move with it
on a restore; a timer that comes due handles every window of its key due by then.

**Lateness.** While a fired window is kept, a record for it updates it and fires it
again at once (a late firing, once per batch and window). A record for a window
already past ``end - 1 + allowed_lateness`` is dropped and counted in
:attr:`WindowFunctionOperator.late_records`, once per window it misses (as the
vectorised window aggregate counts: with sliding windows a record may miss its
oldest windows and still land in the newer ones).

**Restore.** A fired window that is kept carries ``fired = True`` and has no firing
timer left, so it does not fire again; a dropped window is not in the state. Per key
group, the time its windows were handled through is written at each snapshot
(:mod:`job_runtime.operators.record_window`), so a record that was too late before a
failure is too late when replayed after it, instead of opening its window again and
firing a second, partial result.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from job_runtime.errors import UserCodeError
from job_runtime.event_time import TimeKind
from job_runtime.operators.record_window import RecordWindowOperator
from job_runtime.records import Batch, Record
from job_runtime.state.timers import TimeDomain
from job_runtime.windows import LATE_DATA, Window, WindowAssigner

WINDOWS_STATE = "windows"
"""The name, under the operator's, of the state holding each key's open windows."""

StoredWindow = tuple[bool, Any]
"""A window as stored: ``(fired, contents)``; ``fired`` says its result as it is now
was emitted."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class WindowFunctionOperator(RecordWindowOperator):
    """A user function per key and window; subclasses say what a window keeps of
    its records and what it emits when it fires."""

    STATE = WINDOWS_STATE

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        op = self.op
        assert isinstance(op.window, WindowAssigner) and op.fn is not None
        self.assigner: WindowAssigner = op.window
        self.size: int = op.window.size

    @abc.abstractmethod
    def _fold(self, contents: Any | None, records: list[Record]) -> Any:
        """A window's new contents: ``contents`` (``None`` for a new window) and the
        records a batch added to it, in arrival order; ``contents`` is left as it is."""

    @abc.abstractmethod
    def _emit(self, key: Any, start: int, contents: Any) -> Iterable[Record]:
        """What the window of ``key`` at ``start`` emits when it fires."""

    # ------------------------------------------------------------------ records

    def process(self, batch: Batch) -> Batch:
        if not len(batch):
            return Batch(rows=[])
        try:
            return self._process(batch)
        except UserCodeError:
            raise
        except Exception as exc:
            raise self._fail(exc) from exc

    def _process(self, batch: Batch) -> Batch:
        keys, groups = self._keys(batch)
        stamps = self._timestamps(batch)
        rows = batch.rows
        per_key: dict[Any, list[int]] = {}
        for i, key in enumerate(keys):
            per_key.setdefault(key, []).append(i)
        out: list[Record] = []
        for key, indexes in per_key.items():
            self._add(key, groups[indexes[0]], [(stamps[i], rows[i]) for i in indexes], out)
        return Batch(rows=out)

    def _add(self, key: Any, group: int, records: list[tuple[int, Record]],
             out: list[Record]) -> None:
        """Add a key's records of a batch to its windows (one read and one write of
        its state); what windows the watermark had passed emit goes to ``out``."""
        limit = self._limit(group)
        added: dict[int, list[Record]] = {}
        for stamp, record in records:
            accepted = False
            for start in self.assigner.starts_of(stamp):
                if start + self.size - 1 + self.lateness <= limit:
                    self.late_records += 1
                else:
                    added.setdefault(start, []).append(record)
                    accepted = True
            if not accepted:
                self.side.add(LATE_DATA, record)
        if not added:
            return
        stored: dict[int, StoredWindow] = self.backend.get(self._state_name, group, key) or {}
        windows = dict(stored)
        for start in sorted(added):
            _, contents = windows.get(start, (False, None))
            contents = self._fold(contents, added[start])
            # The watermark is past its end already: a late firing, at once.
            fired = start + self.size - 1 <= limit
            windows[start] = (fired, contents)
            if fired:
                out.extend(self._emit(key, start, contents))
        self._store(key, group, before=stored, after=windows)

    def _due(self, windows: Mapping[int, StoredWindow]) -> set[int]:
        """The timers a key's windows need: firing at ``end - 1`` (until fired) and
        dropping at ``end - 1 + allowed_lateness``."""
        due: set[int] = set()
        for start, (fired, _) in windows.items():
            last = start + self.size - 1
            if not fired:
                due.add(last)
            due.add(last + self.lateness)
        return due

    # ------------------------------------------------------------------ time

    def on_watermark(self, watermark: int) -> Batch:
        """Fire the windows the watermark reached, drop those past their lateness."""
        if watermark <= self.watermark:
            return Batch(rows=[])
        self.watermark = watermark
        out: list[Record] = []
        try:
            for timestamp, key, group in self.timers.pop_due(TimeDomain.EVENT_TIME, watermark):
                self._fire(key, group, timestamp, out)
        except UserCodeError:
            raise
        except Exception as exc:
            raise self._fail(exc) from exc
        self.progress.passed(watermark)
        return Batch(rows=out)

    def _fire(self, key: Any, group: int, timestamp: int, out: list[Record]) -> None:
        stored: dict[int, StoredWindow] = self.backend.get(self._state_name, group, key) or {}
        kept: dict[int, StoredWindow] = {}
        for start in sorted(stored):
            fired, contents = stored[start]
            last = start + self.size - 1
            if not fired and last <= timestamp:
                fired = True
                out.extend(self._emit(key, start, contents))
            if last + self.lateness > timestamp:
                kept[start] = (fired, contents)
        self._store(key, group, before=stored, after=kept)

    def _bound(self, millis: int) -> int | datetime:
        return time_bound(millis, time_kind=self.time_kind)

    # ------------------------------------------------------------------ inspection

    def open_windows(self) -> list[tuple[Any, int, bool]]:
        """``(key, start, fired)`` of every kept window."""
        return sorted(((key, start, fired)
                       for _, key, windows in self.backend.iter_entries(self._state_name)
                       for start, (fired, _) in windows.items()), key=repr)


class WindowReduceOperator(WindowFunctionOperator):
    """``window(w).reduce(fn)``: ``fn(accumulated, record) -> accumulated`` per key
    and window, the window's first record its first accumulated value."""

    def _fold(self, contents: Any | None, records: list[Record]) -> Any:
        fn = self.op.fn
        assert fn is not None
        first, rest = (records[0], records[1:]) if contents is None else (contents, records)
        return reduced(fn, first, rest)

    def _emit(self, key: Any, start: int, contents: Any) -> Iterable[Record]:
        return [{**contents, "window_start": self._bound(start),
                 "window_end": self._bound(start + self.size)}]


class WindowProcessOperator(WindowFunctionOperator):
    """``window(w).process(fn)``: ``fn(key, window, records)`` when a window fires."""

    def _fold(self, contents: Any | None, records: list[Record]) -> Any:
        """One more chunk: a batch copies the window's chunks, not all its records,
        so a hot key's long window does not cost a copy of it per batch."""
        return (*_chunks(contents), tuple(records))

    def _emit(self, key: Any, start: int, contents: Any) -> Iterable[Record]:
        fn = self.op.fn
        assert fn is not None
        records = [record for chunk in _chunks(contents) for record in chunk]
        return processed(fn, key, Window(start, start + self.size), records)


def _chunks(contents: tuple[Any, ...] | None) -> tuple[tuple[Record, ...], ...]:
    """A window's records as stored: a tuple of chunks, one per batch that added
    records; state written before chunks (a flat tuple of records) is one chunk."""
    if not contents:
        return ()
    if isinstance(contents[0], dict):
        return (contents,)
    return contents


def time_bound(millis: int, *, time_kind: TimeKind | None) -> int | datetime:
    """A window bound in the event-time column's type, as the window aggregate emits
    it (its ``timestamp[ms, UTC]`` is a UTC ``datetime`` in a record)."""
    if time_kind == TimeKind.TIMESTAMP:
        return _EPOCH + timedelta(milliseconds=millis)
    return millis


def reduced(fn: Callable[[Record, Record], Record], first: Record,
            rest: Iterable[Record]) -> Record:
    """``first`` folded with ``rest`` by a window's reduce function. On a copy: the
    function may change its first argument and return it, and a stored record (or a
    new record, which other sliding windows share) must stay as it is."""
    accumulated = dict(first)
    for record in rest:
        accumulated = fn(accumulated, record)
        if not isinstance(accumulated, dict):
            raise TypeError(f"the reduce function returned {type(accumulated).__name__}; "
                            f"it must return a record (a dict)")
    return accumulated


def processed(fn: Callable[..., Iterable[Record] | None], key: Any, window: Window,
              records: Iterable[Record]) -> list[Record]:
    """What a window's process function returns for ``records``, given copies: what
    it does to its records must not reach the state."""
    produced = fn(key, window, [dict(r) for r in records])
    if produced is None:
        return []
    if isinstance(produced, Mapping):
        raise TypeError("the window process function returned one record; it must "
                        "return an iterable of records (or None)")
    return list(produced)
