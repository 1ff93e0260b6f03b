"""Event-time windows: which windows a record's timestamp falls in.

``key_by(...).window(windows.tumbling("1m")).aggregate(...)`` counts per key and
minute; ``windows.sliding("10m", every="1m")`` per key and ten minutes, every
minute. A window is ``[start, start + size)`` in milliseconds of event time, aligned
to the epoch (plus ``offset``), as in Flink and Spark. It fires once the watermark
reaches its last millisecond (``end - 1``): by then no record of it should still
come. Assignment is vectorised: a batch of timestamps gives, per window it touches,
the rows that fall in it, without a Python call per record. ``reduce`` and
``process`` per window (:mod:`job_runtime.operators.window_function`) run a Python
function per record anyway, so they assign one timestamp at a time
(:meth:`WindowAssigner.starts_of`); a ``process`` function is told its window as a
:class:`Window`.

``windows.session(gap="30s")`` cuts a key's records into sessions instead: each
record opens ``[t, t + gap)`` and windows of a key that overlap merge, so a session
ends after ``gap`` without a record. Sessions depend on the records a key has seen,
so they are assigned record by record in their operator
(:mod:`job_runtime.operators.session_window`), not here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from job_runtime.durations import duration_ms
from job_runtime.errors import PipelineDefinitionError


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowAssigner:
    """Windows of ``size`` ms, one starting every ``slide`` ms (``slide == size``:
    tumbling), starts aligned to ``offset`` ms past the epoch."""

    size: int
    slide: int
    offset: int = 0

    @property
    def kind(self) -> str:
        return "tumbling" if self.slide == self.size else "sliding"

    def last_start(self, timestamps: np.ndarray) -> np.ndarray:
        """The start of the latest window holding each timestamp (floor, negatives too)."""
        shifted = timestamps - self.offset
        starts: np.ndarray = timestamps - np.mod(shifted, self.slide)
        return starts

    def assign(self, timestamps: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """``(window start, row indexes)`` once for each window the timestamps fall in,
        in the order of the starts."""
        last = self.last_start(timestamps)
        starts_parts: list[np.ndarray] = []
        rows_parts: list[np.ndarray] = []
        for back in range(-(-self.size // self.slide)):
            starts = last - back * self.slide
            rows = np.flatnonzero(starts + self.size > timestamps)
            starts_parts.append(starts[rows])
            rows_parts.append(rows)
        yield from by_start(np.concatenate(starts_parts), np.concatenate(rows_parts))

    def starts_of(self, timestamp: int) -> list[int]:
        """The starts of the windows holding one timestamp, earliest first: what
        :meth:`assign` gives a batch, for an operator that takes a record at a time."""
        last = timestamp - (timestamp - self.offset) % self.slide
        count = -(-self.size // self.slide)
        return [start for start in range(last - (count - 1) * self.slide, last + 1, self.slide)
                if start + self.size > timestamp]

    def describe(self) -> str:
        if self.kind == "tumbling":
            return f"tumbling({self.size}ms)"
        return f"sliding({self.size}ms, every={self.slide}ms)"


@dataclasses.dataclass(frozen=True)
class Window:
    """One window of a key, ``[start, end)`` in ms of event time: what a window
    ``process`` function is told about the window it is called for (the bounds are
    ms whatever the event-time column's type, so that arithmetic on them is plain)."""

    start: int
    end: int


def by_start(starts: np.ndarray, rows: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, rows)`` once per distinct window start, in the order of the starts:
    ``starts[i]`` is the window of ``rows[i]``."""
    if not len(rows):
        return
    if starts.min() == starts.max():  # the usual batch: one tumbling window
        yield int(starts[0]), rows
        return
    order = np.argsort(starts, kind="stable")
    starts, rows = starts[order], rows[order]
    bounds = np.flatnonzero(np.diff(starts)) + 1
    for part, first in zip(np.split(rows, bounds), starts[np.r_[0, bounds]], strict=True):
        yield int(first), part


def tumbling(size: str | float, *, offset: str | float = 0) -> WindowAssigner:
    """Windows of ``size`` that do not overlap: each record is in exactly one."""
    size_ms = duration_ms(size, what="windows.tumbling size", allow_zero=False)
    offset_ms = duration_ms(offset, what="windows.tumbling offset")
    return WindowAssigner(size=size_ms, slide=size_ms, offset=offset_ms % size_ms)


def sliding(size: str | float, *, every: str | float, offset: str | float = 0) -> WindowAssigner:
    """Windows of ``size`` starting ``every`` apart: each record is in ``size / every``
    of them (``every`` must divide ``size``)."""
    size_ms = duration_ms(size, what="windows.sliding size", allow_zero=False)
    every_ms = duration_ms(every, what="windows.sliding every", allow_zero=False)
    if every_ms > size_ms or size_ms % every_ms:
        raise PipelineDefinitionError(
            problem=f"windows.sliding every ({every!r}) must divide its size ({size!r})")
    offset_ms = duration_ms(offset, what="windows.sliding offset")
    return WindowAssigner(size=size_ms, slide=every_ms, offset=offset_ms % every_ms)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SessionWindows:
    """Sessions per key: a record at ``t`` opens ``[t, t + gap)`` (``gap`` in ms), and
    a key's windows that overlap merge into one."""

    gap: int

    @property
    def kind(self) -> str:
        return "session"

    def describe(self) -> str:
        return f"session(gap={self.gap}ms)"


def session(gap: str | float) -> SessionWindows:
    """A key's records at most ``gap`` apart are in one session window; it closes once
    ``gap`` passes without a record of the key."""
    return SessionWindows(gap=duration_ms(gap, what="windows.session gap", allow_zero=False))


LATE_DATA = "late-data"
"""The side-output tag of records too late for every window they belong to."""


def late_data() -> str:
    """The tag to read a windowed stream's too-late records by:
    ``rows.side_output(windows.late_data()).sink(...)``. A record goes there when
    every window it belongs to was already dropped (past its end plus the allowed
    lateness); it is counted in ``cjob_job_late_records_total`` too. Without such a
    branch it is counted and dropped."""
    return LATE_DATA
