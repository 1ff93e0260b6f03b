"""What the record-at-a-time window operators share: session windows
(:mod:`job_runtime.operators.session_window`) and ``reduce`` / ``process`` per
tumbling or sliding window (:mod:`job_runtime.operators.window_function`).

Both keep a key's windows as one value of keyed state (``<operator>/<STATE>``),
fire and drop them with event-time timers of the key, and need the same care on a
restore, which :class:`RecordWindowOperator` gives them.

**Progress per key group.** Sources restart from the minimum watermark after a
restore, so such an operator cannot trust its own watermark to tell which of its
windows were too late before a failure. Each snapshot therefore records, per key
group of the subtask, the time its windows were handled through and the event-time
column's kind (``<operator>/progress``, one entry per key group, in the keyed state
so that it moves with the group on a restore at any parallelism). After a restore a
record counts as late against its group's time or the watermark, whichever is
later: a record that was too late before the failure stays too late when replayed,
instead of opening a window that would fire a second, partial row. Once the
watermark passes every restored group's time, the groups no longer differ.

**Timers per window.** A window needs an event-time timer at its last millisecond
(until it fired) and one at its cleanup time (:meth:`RecordWindowOperator._due`
says which a key's windows need); :meth:`RecordWindowOperator._store` writes a
key's changed windows and turns the timers they needed before into those they need
now, touching only the difference.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any, ClassVar

from job_runtime.event_time import TimeKind
from job_runtime.operators.record_keyed import RecordKeyedOperator
from job_runtime.records import Batch
from job_runtime.state.backend import AnySnapshot, KeyedStateBackend
from job_runtime.state.timers import TimeDomain, TimerService
from job_runtime.watermarks import MIN_WATERMARK, record_times

PROGRESS_STATE = "progress"
"""The name, under the operator's, of the state holding, per key group, the time its
windows were handled through and the event-time column's kind."""
_GROUP = None
"""The key of the one ``progress`` entry of a key group."""


class GroupProgress:
    """The per-key-group progress of one operator subtask (see the module)."""

    def __init__(self, *, backend: KeyedStateBackend, operator: str,
                 key_groups: range) -> None:
        self._backend = backend
        self._name = f"{operator}/{PROGRESS_STATE}"
        self._key_groups = key_groups
        self._through: dict[int, int] = {}
        """Per key group, the time a restored snapshot had handled its windows
        through, where later than the watermark."""
        self._written: dict[int, tuple[int, str | None]] = {}
        """Per key group, its entry as last written or restored: an unchanged entry
        is not written again, so an incremental checkpoint does not carry it."""

    def limit(self, group: int, watermark: int) -> int:
        """The time the key group's windows count as handled through."""
        return max(watermark, self._through.get(group, MIN_WATERMARK))

    def passed(self, watermark: int) -> None:
        """The watermark reached ``watermark``: forget the restored times it passed."""
        if self._through and watermark >= max(self._through.values()):
            self._through.clear()

    def write(self, watermark: int, time_kind: TimeKind | None) -> None:
        """Before a snapshot: each owned key group's entry, where it changed."""
        kind = None if time_kind is None else time_kind.value
        for group in self._key_groups:
            entry = (self.limit(group, watermark), kind)
            if (entry[0] > MIN_WATERMARK or kind is not None) \
                    and self._written.get(group) != entry:
                self._backend.put(self._name, group, _GROUP, entry)
                self._written[group] = entry

    def restore(self, watermark: int) -> TimeKind | None:
        """After the backend restored: the groups' times; returns the event time's
        kind, if a snapshot knew it."""
        time_kind: TimeKind | None = None
        for group, _, entry in self._backend.iter_entries(self._name):
            through, kind = entry
            self._written[group] = (through, kind)
            if through > watermark:
                self._through[group] = max(through, self._through.get(group, through))
            if kind is not None and time_kind is None:
                time_kind = TimeKind(kind)
        return time_kind


class RecordWindowOperator(RecordKeyedOperator):
    """A key's windows in one keyed state (:attr:`STATE`), event-time timers, and the
    per-key-group progress that keeps late records late across a restore."""

    STATE: ClassVar[str]
    """The name, under the operator's, of the state holding each key's windows."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        op = self.op
        assert op.event_time is not None
        self.event_time: str = op.event_time
        self.lateness: int = op.allowed_lateness
        self.timers = TimerService(backend=self.backend, operator=op.uid)
        self.progress = GroupProgress(backend=self.backend, operator=op.uid,
                                      key_groups=self.key_groups)
        """Per key group, the time its windows were handled through (see the module)."""
        self.watermark = MIN_WATERMARK
        self.time_kind: TimeKind | None = None
        self._state_name = f"{op.uid}/{self.STATE}"

    @abc.abstractmethod
    def _due(self, windows: Any) -> set[int]:
        """The event-time timers a key's windows (as stored) need."""

    def _timestamps(self, batch: Batch) -> list[int]:
        """Each record's event time in ms; notes the column's kind (a batch of rows
        only tells it when none is known yet)."""
        stamps, kind = record_times(batch, column=self.event_time, operator=self.op.uid,
                                    subtask=self.subtask)
        if kind is not None and (batch.has_arrow or self.time_kind is None):
            self.time_kind = kind
        return stamps

    def _limit(self, group: int) -> int:
        """The time the key group's windows count as handled through."""
        return self.progress.limit(group, self.watermark)

    def _store(self, key: Any, group: int, *, before: Any, after: Any) -> None:
        """Replace a key's windows ``before`` (as read) by ``after`` (none left: the
        entry goes), and its timers: those only ``before`` needed are deleted, those
        only ``after`` needs registered."""
        if after:
            self.backend.put(self._state_name, group, key, after)
        elif before:
            self.backend.delete(self._state_name, group, key)
        old, new = self._due(before), self._due(after)
        for timestamp in sorted(old - new):
            self.timers.delete(TimeDomain.EVENT_TIME, timestamp, key=key, key_group=group)
        for timestamp in sorted(new - old):
            self.timers.register(TimeDomain.EVENT_TIME, timestamp, key=key, key_group=group)

    def snapshot(self) -> AnySnapshot:
        """The backend's snapshot, after writing each owned key group's progress (the
        time its windows were handled through, the event time's kind) into it."""
        self.progress.write(self.watermark, self.time_kind)
        return super().snapshot()

    def restore(self, blobs: Iterable[bytes]) -> int:
        super().restore(blobs)
        self.timers.restore()
        self.time_kind = self.time_kind or self.progress.restore(self.watermark)
        return self.key_count()

    def key_count(self) -> int:
        """Keys with open windows."""
        return sum(1 for _ in self.backend.iter_entries(self._state_name))
