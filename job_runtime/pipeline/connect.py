"""Two keyed streams connected: one function sees the records of both, with the key's
state and timers shared, and the interval join built on it.

``a.key_by(k).connect(b.key_by(j))`` needs no new machinery in the engine. Each side's
records are wrapped before the exchange, by a record function of that side's own chain:
the side's number (``ctx.input``: 0 for ``a``, 1 for ``b``), the key its ``key_by``
names, the event time when the sources have watermarks, and the record itself, pickled
whole (so the two sides' different columns travel as one schema). The two sides are
then a ``union`` keyed by that key, and the connected function is a ``process`` whose
wrapper unwraps each record. Everything a keyed ``process`` has, a connected one has
too: value, map and TTL state per key, event- and processing-time timers, rescaling
through key groups, aligned and unaligned checkpoints over both inputs, and the
minimum of the two inputs' watermarks (a ``union``'s); an input that ends leaves the
other running.

The interval join (:meth:`ConnectedStreams.interval_join`) keeps each side's records in
map state per key and emits each pair whose times satisfy ``lower <= b.ts - a.ts <=
upper``; a record is dropped from state once the watermark says no record of the other
side can still pair with it, and a record later than that is routed to the side output
``late`` instead of joining. The window join (:meth:`ConnectedStreams.window_join`)
keeps them per window instead and pairs a window's records when it ends.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable
from typing import Any

from job_runtime.durations import duration_ms
from job_runtime.errors import PipelineDefinitionError
from job_runtime.records import KeySelector, Record, key_of
from job_runtime.windows import WindowAssigner

INPUT = "__cjob_input"
KEY = "__cjob_key"
RECORD = "__cjob_record"
LATE = "late"
"""The side output of an interval join's records too late to pair."""

JoinFunction = Callable[[Record, Record], Record | None]


class Tagged:
    """The record function that wraps one side's records for the shared exchange."""

    def __init__(self, *, side: int, key: str | tuple[str, ...] | KeySelector,
                 event_time: str | None) -> None:
        self.side = side
        self.key = key
        self.event_time = event_time

    def __call__(self, record: Record) -> Record:
        wrapped = {INPUT: self.side, KEY: key_of(record, self.key),
                   RECORD: pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)}
        if self.event_time is not None:
            wrapped[self.event_time] = record[self.event_time]
        return wrapped


def unwrapped(record: Record, ctx: Any) -> Record:
    """The side's own record, with ``ctx.input`` set to its side."""
    ctx.input = record[INPUT]
    inner: Record = pickle.loads(record[RECORD])
    return inner


class Connected:
    """``fn(record, ctx)`` of a connected stream, called with each side's own records."""

    def __init__(self, fn: Callable[[Record, Any], Iterable[Record] | None]) -> None:
        self.fn = fn

    def __call__(self, record: Record, ctx: Any) -> Iterable[Record] | None:
        return self.fn(unwrapped(record, ctx), ctx)


def signed_ms(value: str | float, *, what: str) -> int:
    """A duration that may be negative (``"-5m"``, ``"+1m"``, ``-300``), in ms."""
    if isinstance(value, str) and value.strip().startswith(("-", "+")):
        text = value.strip()
        sign = -1 if text[0] == "-" else 1
        return sign * duration_ms(text[1:], what=what)
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        return -duration_ms(-value, what=what)
    return duration_ms(value, what=what)


class ConnectedTimer:
    """``on_timer(ts, ctx)`` of a connected stream: a timer is the key's, of no side."""

    def __init__(self, fn: Callable[[int, Any], Iterable[Record] | None]) -> None:
        self.fn = fn

    def __call__(self, timestamp: int, ctx: Any) -> Iterable[Record] | None:
        ctx.input = None
        return self.fn(timestamp, ctx)


def merged(left: Record, right: Record) -> Record:
    """The default joined record: the left record's fields, then the right one's that
    the left one does not have."""
    return {**right, **left}


class IntervalJoin:
    """``process`` and ``on_timer`` of an interval join (see the module docstring).

    State per key: ``left`` and ``right`` maps from event time to the records of that
    time. A left record at ``t`` pairs with right records in ``[t + lower, t + upper]``
    and may still meet one until the watermark passes ``t + upper``; a right record at
    ``s`` pairs with left records in ``[s - upper, s - lower]`` and waits until the
    watermark passes ``s - lower``. Each record registers the timer of its expiry (a
    millisecond after it: a record at the watermark is not late).
    """

    SIDES = ("left", "right")

    def __init__(self, *, lower: int, upper: int, fn: JoinFunction) -> None:
        self.lower = lower
        self.upper = upper
        self.fn = fn

    def _expiry(self, side: int, ts: int) -> int:
        """The last time a record of the other side may have and still pair with it."""
        return ts + self.upper if side == 0 else ts - self.lower

    def process(self, record: Record, ctx: Any) -> list[Record]:
        inner = unwrapped(record, ctx)
        side: int = ctx.input
        ts = ctx.timestamp
        if ts is None:
            raise TypeError("an interval join needs event time: give both sources "
                            "watermarks=")
        expiry = self._expiry(side, ts)
        if expiry < ctx.current_watermark:
            # No record of the other side can still pair with it: it is late.
            ctx.output(LATE, inner)
            return []
        out: list[Record] = []
        other = ctx.map_state(self.SIDES[1 - side])
        if side == 0:
            low, high = ts + self.lower, ts + self.upper
        else:
            low, high = ts - self.upper, ts - self.lower
        for when, records in other.items():
            if low <= when <= high:
                for match in records:
                    joined = self.fn(inner, match) if side == 0 else self.fn(match, inner)
                    if joined is not None:
                        out.append(joined)
        mine = ctx.map_state(self.SIDES[side])
        mine.put(ts, (*mine.get(ts, ()), inner))
        # A record at the watermark may still come: forget it once the watermark is past.
        ctx.timers.register_event_time(expiry + 1)
        return out

    def on_timer(self, timestamp: int, ctx: Any) -> None:
        """Forget the records of either side that can no longer pair."""
        for side, name in enumerate(self.SIDES):
            state = ctx.map_state(name)
            times = list(state.keys())
            gone = [when for when in times if self._expiry(side, when) < timestamp]
            if len(gone) == len(times):
                state.clear()  # the key holds nothing of this side: no empty map stays
            else:
                for when in gone:
                    state.remove(when)
        return None


class WindowJoin:
    """``process`` and ``on_timer`` of a window join: each side's records kept per window
    start in map state (``left``, ``right``), every pair of one window emitted when the
    watermark passes its end, then the window forgotten. A record whose every window
    has fired is late."""

    SIDES = ("left", "right")

    def __init__(self, *, assigner: WindowAssigner, fn: JoinFunction) -> None:
        self.assigner = assigner
        self.fn = fn

    def process(self, record: Record, ctx: Any) -> None:
        inner = unwrapped(record, ctx)
        ts = ctx.timestamp
        if ts is None:
            raise TypeError("a window join needs event time: give both sources watermarks=")
        starts = [start for start in self.assigner.starts_of(ts)
                  if start + self.assigner.size > ctx.current_watermark]
        if not starts:
            ctx.output(LATE, inner)
            return None
        mine = ctx.map_state(self.SIDES[ctx.input])
        for start in starts:
            mine.put(start, (*mine.get(start, ()), inner))
            ctx.timers.register_event_time(start + self.assigner.size)
        return None

    def on_timer(self, timestamp: int, ctx: Any) -> list[Record]:
        """Join and forget every window that ended by ``timestamp``."""
        left, right = (ctx.map_state(name) for name in self.SIDES)
        ended = sorted({start for state in (left, right) for start, _ in state.items()
                        if start + self.assigner.size <= timestamp})
        out: list[Record] = []
        for start in ended:
            for first in left.get(start, ()):
                for second in right.get(start, ()):
                    joined = self.fn(first, second)
                    if joined is not None:
                        out.append(joined)
            left.remove(start)
            right.remove(start)
        for state in (left, right):
            if not any(True for _ in state.items()):
                state.clear()
        return out


class ConnectedStreams:
    """``a.key_by(k).connect(b.key_by(j))``: ``process`` with both sides' records, or
    ``interval_join``."""

    def __init__(self, keyed: Any) -> None:
        self._keyed = keyed

    def process(self, fn: Callable[[Record, Any], Iterable[Record] | None], *,
                on_timer: Callable[[int, Any], Iterable[Record] | None] | None = None,
                name: str | None = None) -> Any:
        """``fn(record, ctx)`` for the records of both streams; ``ctx.input`` is 0 for
        a record of the first, 1 for one of the second. State (``ctx.value_state``,
        ``ctx.map_state``) and timers are the key's, shared by both; ``on_timer`` as in
        a keyed ``process`` (where ``ctx.input`` is ``None``: a timer is the key's)."""
        if not callable(fn):
            raise PipelineDefinitionError(problem="connect(...).process() needs a function")
        if on_timer is not None and not callable(on_timer):
            raise PipelineDefinitionError(
                problem="connect(...).process(on_timer=...) needs a function of "
                        "(timestamp, ctx)")
        timer = None if on_timer is None else ConnectedTimer(on_timer)
        return self._keyed.process(Connected(fn), on_timer=timer, name=name)

    def _pair_function(self, *, operation: str, fn: JoinFunction | None) -> JoinFunction:
        """What both joins check before they are built: a function of a pair if one is
        given (else ``merged``), and event time, since a join's pairs end by watermark."""
        if fn is not None and not callable(fn):
            raise PipelineDefinitionError(problem=f"{operation}(fn=...) needs a function "
                                                  "of (first, second)")
        if self._keyed._p.watermarks is None:
            raise PipelineDefinitionError(
                problem=f"{operation}() needs event time: give both sources watermarks=")
        return fn or merged

    def interval_join(self, *, lower: str | float, upper: str | float,
                      fn: JoinFunction | None = None, name: str | None = None) -> Any:
        """Pairs of a first-stream record at ``t`` and a second-stream record at ``s``
        of the same key with ``t + lower <= s <= t + upper`` (``lower="-5m"``,
        ``upper="1m"``: the second within five minutes before and one after),
        ``fn(first, second)`` each (by default the first's fields, then the second's it
        lacks); records too late to pair go to ``side_output("late")``."""
        lower_ms = signed_ms(lower, what="interval_join() lower")
        upper_ms = signed_ms(upper, what="interval_join() upper")
        if lower_ms > upper_ms:
            raise PipelineDefinitionError(
                problem=f"interval_join() needs lower <= upper, got {lower!r} > {upper!r}")
        pair = self._pair_function(operation="interval_join", fn=fn)
        join = IntervalJoin(lower=lower_ms, upper=upper_ms, fn=pair)
        return self._keyed.process(join.process, on_timer=join.on_timer,
                                   name=name or self._keyed._p.uid("interval_join", None))

    def window_join(self, assigner: WindowAssigner, *, fn: JoinFunction | None = None,
                    name: str | None = None) -> Any:
        """Pairs of a first-stream and a second-stream record of the same key in the
        same event-time window (``windows.tumbling("1m")`` or ``windows.sliding``),
        ``fn(first, second)`` each, emitted when the watermark passes the window's end;
        records too late for every window of theirs go to ``side_output("late")``."""
        if not isinstance(assigner, WindowAssigner):
            raise PipelineDefinitionError(
                problem="window_join() needs windows.tumbling(...) or windows.sliding(...)")
        pair = self._pair_function(operation="window_join", fn=fn)
        join = WindowJoin(assigner=assigner, fn=pair)
        return self._keyed.process(join.process, on_timer=join.on_timer,
                                   name=name or self._keyed._p.uid("window_join", None))
