"""``key_by(k).window(windows.session(gap="30s")).aggregate(...)``: aggregates per key
and session.

**Why record by record.** A record at event time ``t`` opens the window
``[t, t + gap)``, and a key's windows that overlap merge into one (the earliest start,
the latest end): a session is a run of a key's records less than ``gap`` apart. Which
session a record is in depends on the key's other records, in whatever order they
come, so there is nothing to assign ahead of the exchange or to combine there (as
the tumbling and sliding operator does): this operator takes the records, one key
at a time, and a record may extend a session, open one, or join two into one (it
falls in the gap between them, closer than ``gap`` to both).

**State.** A key's open sessions are one value of keyed state
(``<operator>/sessions``): ``(start, end, fired, accumulators)`` tuples, sorted by
start, of plain Python values. So both backends keep it as they keep any keyed
state: copy-on-write snapshots (values are replaced, never changed in place),
incremental ``rocksdb`` checkpoints, and restores at any parallelism, each key on
the subtask of its key group.

**Timers per session.** A session fires (one row: key, ``window_start``,
``window_end``, the outputs) when the watermark reaches its last millisecond,
``end - 1``; it is dropped once the watermark reaches ``end - 1 + allowed_lateness``.
Both are event-time timers of the key (:class:`~job_runtime.state.timers.TimerService`),
stored in the same key group as the session, so they move with it on a restore. A
merge that moves a session's end deletes the timers no session of the key needs any
more and registers the new ones; a timer that comes due handles every session of
its key that is due by then, so two sessions sharing a timestamp need no care.

**Lateness.** While a fired session is kept, a record that merges into it updates it
and emits its row again at once (a late firing, once per batch and session); if the
merge moved its end past the watermark, it fires again when the watermark gets
there. A record whose session, merged with those kept, would already be past
``end - 1 + allowed_lateness`` is counted in
:attr:`SessionWindowOperator.late_records` and dropped. Only a record that overlaps
no kept session can be late: a kept session has not reached its own cleanup time.

**Restore.** Sources restart from the minimum watermark after a restore, so the
operator cannot trust its own watermark to tell what it fired before. A fired
session that is kept carries ``fired = True`` and has no firing timer left, so it
does not fire again; a session that was dropped is not in the state. And, as the
tumbling operator does, each snapshot records per key group the watermark its
sessions were handled through (``<operator>/progress``, one entry per key group,
kept by :mod:`job_runtime.operators.record_window`): after a restore a record
counts as late against that time or the watermark, whichever is later, so a record
that was too late before a failure is too late when replayed after it, instead of
opening a new session that would fire a second, partial row. Once the watermark
passes every restored group's time, the groups no longer differ.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from job_runtime.event_time import TimeKind
from job_runtime.operators.accumulators import accumulator_specs, key_columns_of
from job_runtime.operators.record_window import RecordWindowOperator
from job_runtime.records import Batch, key_array
from job_runtime.state.timers import TimeDomain
from job_runtime.watermarks import time_array
from job_runtime.windows import LATE_DATA, SessionWindows

SESSIONS_STATE = "sessions"
"""The name, under the operator's, of the state holding each key's open sessions."""
Session = tuple[int, int, bool, tuple[Any, ...]]
"""``(start, end, fired, contents)`` as stored: ``fired`` says the row of the session
as it is now was emitted; the contents are accumulators following
:attr:`SessionWindowOperator.specs` (or, for ``reduce`` and ``process``, the reduced
record or the ``(event time, record)`` pairs)."""


class _Open:
    """A session while a batch changes it (stored as a :data:`Session`)."""

    __slots__ = ("accumulators", "end", "fired", "start", "touched")

    def __init__(self, start: int, end: int, fired: bool, accumulators: list[float],
                 touched: bool) -> None:
        self.start = start
        self.end = end
        self.fired = fired
        self.accumulators = accumulators
        self.touched = touched

    def stored(self) -> Session:
        return self.start, self.end, self.fired, tuple(self.accumulators)


class SessionWindowOperator(RecordWindowOperator):
    """Per key and session: ``count``, ``sum``, ``min``, ``max``, ``mean``."""

    STATE = SESSIONS_STATE

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        op = self.op
        assert isinstance(op.window, SessionWindows)
        assert isinstance(op.key.key, str | tuple)
        self.key: str | tuple[str, ...] = op.key.key
        self.gap: int = op.window.gap
        self.specs: list[tuple[str, str | None]] = list(accumulator_specs(op.aggregates).values())
        """``(function, column)`` of each accumulator, in the order a session stores them."""
        self._slot = {name: i for i, name in enumerate(accumulator_specs(op.aggregates))}
        self._sessions = f"{op.uid}/{SESSIONS_STATE}"
        self._key_type: pa.DataType | None = None

    # ------------------------------------------------------------------ records

    def process(self, batch: Batch) -> Batch:
        if not len(batch):
            return Batch(rows=[])
        return self._vectorised(self._process, batch)

    def _process(self, batch: Batch) -> Batch:
        keys, groups = self._keys(batch)
        stamps = self._timestamps(batch)
        contents = self._contents(batch, stamps)
        by_key: dict[Any, tuple[int, list[int]]] = {}
        for i, (key, group) in enumerate(zip(keys, groups, strict=True)):
            entry = by_key.get(key)
            if entry is None:
                by_key[key] = (group, [i])
            else:
                entry[1].append(i)
        out: list[tuple[Any, Session]] = []
        late: list[int] = []
        for key, (group, rows) in by_key.items():
            self._add(key, group, [(stamps[i], contents[i], i) for i in rows], out, late)
        if late:
            self.side.add_batch(LATE_DATA, batch.take(np.asarray(late, dtype=np.int64)))
        return self._rows(out)

    def _contents(self, batch: Batch, stamps: list[int]) -> list[list[Any]]:
        """What a session of each record alone holds (its accumulators here; the
        function variants in :mod:`job_runtime.operators.session_function` hold the
        records)."""
        values = self._inputs(batch)
        return [self._record(values, i) for i in range(len(batch))]

    def _inputs(self, batch: Batch) -> dict[str, list[Any]]:
        """The aggregated columns of the batch, as Python values."""
        columns = {column for _, column in self.specs if column is not None}
        if batch.has_arrow:
            arrow = batch.arrow
            self._key_type = key_array(arrow.slice(0, 0), self.key).type
            return {column: arrow.column(column).to_pylist() for column in columns}
        return {column: [row[column] for row in batch.rows] for column in columns}

    def _record(self, values: dict[str, list[Any]], row: int) -> list[float]:
        """The accumulators of a session of this one record."""
        accumulators: list[float] = []
        for func, column in self.specs:
            if func == "count":
                accumulators.append(1)
            else:
                assert column is not None
                value = values[column][row]
                accumulators.append(math.nan if value is None else float(value))
        return accumulators

    def _merged(self, new: list[Any], kept: list[Any]) -> list[Any]:
        """A record's session (``new``) merged with a kept one (``kept``, this batch's
        copy of the stored contents: either may be changed)."""
        self._merge(new, kept)
        return new

    def _merge(self, into: list[Any], other: Iterable[Any]) -> None:
        """Fold a merged session's contents (``other``, stored, never changed) into
        ``into`` (a new record's session, changed in place)."""
        for i, ((func, _), value) in enumerate(zip(self.specs, other, strict=True)):
            current = into[i]
            if func in ("count", "sum"):
                into[i] = current + value
            elif math.isnan(current) or math.isnan(value):
                into[i] = math.nan  # as numpy's minimum and maximum
            elif func == "min":
                into[i] = min(current, value)
            else:
                into[i] = max(current, value)

    def _add(self, key: Any, group: int, records: list[tuple[int, list[Any], int]],
             out: list[tuple[Any, Session]], late: list[int]) -> None:
        """Fold a key's records of a batch into its sessions (one read and one write
        of its state); the rows of sessions a record changed after they fired go to
        ``out``."""
        stored: tuple[Session, ...] = self.backend.get(self._sessions, group, key) or ()
        sessions = [_Open(start, end, fired, list(acc), False)
                    for start, end, fired, acc in stored]
        limit = self._limit(group)
        changed = False
        for stamp, accumulators, row in records:
            start, end = stamp, stamp + self.gap
            overlapping = [s for s in sessions if s.start < end and stamp < s.end]
            merged_end = max([end, *(s.end for s in overlapping)])
            if merged_end - 1 + self.lateness <= limit:
                self.late_records += 1
                late.append(row)
                continue
            changed = True
            for s in overlapping:
                start = min(start, s.start)
                accumulators = self._merged(accumulators, s.accumulators)
            session = _Open(start, merged_end, False, accumulators, True)
            sessions = [s for s in sessions if s not in overlapping]
            sessions.append(session)
            sessions.sort(key=lambda s: s.start)
        if not changed:
            return
        for s in sessions:
            if s.touched:
                # The watermark is past its end already: a late firing, at once.
                s.fired = s.end - 1 <= limit
                if s.fired:
                    out.append((key, s.stored()))
        after = [s.stored() for s in sessions]
        self._store(key, group, before=stored, after=tuple(after))

    def _due(self, sessions: Iterable[Session]) -> set[int]:
        """The timers a key's sessions need: firing at ``end - 1`` (until fired) and
        dropping at ``end - 1 + allowed_lateness``."""
        due: set[int] = set()
        for _, end, fired, _ in sessions:
            if not fired:
                due.add(end - 1)
            due.add(end - 1 + self.lateness)
        return due

    # ------------------------------------------------------------------ time

    def on_watermark(self, watermark: int) -> Batch:
        """Fire the sessions the watermark reached, drop those past their lateness."""
        if watermark <= self.watermark:
            return Batch(rows=[])
        self.watermark = watermark
        out: list[tuple[Any, Session]] = []
        for timestamp, key, group in self.timers.pop_due(TimeDomain.EVENT_TIME, watermark):
            stored: tuple[Session, ...] = self.backend.get(self._sessions, group, key) or ()
            kept: list[Session] = []
            for start, end, fired, accumulators in stored:
                if not fired and end - 1 <= timestamp:
                    fired = True
                    out.append((key, (start, end, fired, accumulators)))
                if end - 1 + self.lateness > timestamp:
                    kept.append((start, end, fired, accumulators))
            self._store(key, group, before=stored, after=tuple(kept))
        self.progress.passed(watermark)
        try:
            return self._rows(out)
        except Exception as exc:  # a user function per session
            raise self._fail(exc) from exc

    def _rows(self, fired: list[tuple[Any, Session]]) -> Batch:
        if not fired:
            return Batch(rows=[])
        kind = self.time_kind or TimeKind.EPOCH_MS
        starts = np.array([session[0] for _, session in fired], dtype=np.int64)
        ends = np.array([session[1] for _, session in fired], dtype=np.int64)
        keys = pa.array([key if isinstance(self.key, str) else dict(zip(self.key, key,
                                                                          strict=True))
                         for key, _ in fired], type=self._key_type)
        key_names, key_arrays = key_columns_of(self.key, keys)
        names = [*key_names, "window_start", "window_end"]
        arrays = [*key_arrays, time_array(starts, time_kind=kind), time_array(ends, time_kind=kind)]
        for out, func, column in self.op.aggregates:
            if func == "count":
                counts = [acc[self._slot["count"]] for _, (_, _, _, acc) in fired]
                arrays.append(pa.array(counts, type=pa.int64()))
            elif func == "mean":
                n, total = self._slot["count"], self._slot[f"sum:{column}"]
                arrays.append(pa.array([acc[total] / acc[n] for _, (_, _, _, acc) in fired],
                                       type=pa.float64()))
            else:
                slot = self._slot[f"{func}:{column}"]
                arrays.append(pa.array([acc[slot] for _, (_, _, _, acc) in fired],
                                       type=pa.float64()))
            names.append(out)
        return Batch(arrow=pa.RecordBatch.from_arrays(arrays, names=names))

    # ------------------------------------------------------------------ checkpoints

    def open_sessions(self) -> list[tuple[Any, int, int, bool]]:
        """``(key, start, end, fired)`` of every kept session, for inspection."""
        return sorted(((key, start, end, fired)
                       for _, key, sessions in self.backend.iter_entries(self._sessions)
                       for start, end, fired, _ in sessions), key=repr)
