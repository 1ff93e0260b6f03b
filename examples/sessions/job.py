"""Per-user sessions from clicks that arrive out of order, two ways.

A session is a user's run of clicks with less than ``gap`` (default ``30s``) of event
time between one and the next; it ends ``gap`` after its last click. Both jobs read
the JSON lines clicks of the clicks-per-minute example (``{"user", "ts", "amount",
...}``, ``ts`` in milliseconds since the epoch, up to 20 s out of order) and write one
row per session once the watermark passes its end, exactly once whatever is killed:
``{"user", "window_start", "window_end", "n", "total", ...}``.

* ``build``: ``key_by("user").window(windows.session(gap=...)).aggregate(...)``: the
  runtime merges each click's ``[ts, ts + gap)`` with the user's overlapping ones.
* ``build_with_timers``: the same sessions written by hand with ``process()`` and
  timers. Each click waits in map state until the watermark passes its time (an
  event-time timer per click time), so ``on_timer`` sees a user's clicks in
  event-time order whatever order they came in: a click ``gap`` or more after the
  open session's last one ends it; a timer at the session's last millisecond ends
  it when no click comes. It also numbers each user's sessions (``session``) in a
  counter with a TTL, so a user quiet for 24 hours starts again at 1 and a job
  keyed by user id does not keep every user forever.

Arguments: ``input`` and ``output`` (directories), ``gap``, ``max_delay`` (how far out
of order clicks come, default ``25s``), ``delay_ms`` (milliseconds per click, so a
kill lands mid-run), ``batch_size``.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

from job_runtime import Pipeline, Stream, sinks, sources, watermarks, windows
from job_runtime.durations import duration_ms


def _clicks(p: Pipeline) -> Stream:
    delay = float(p.args.get("delay_ms", 0)) / 1000.0

    def slowly(batch: pa.RecordBatch) -> pa.RecordBatch:
        if delay:
            time.sleep(delay * batch.num_rows)
        return batch

    return (p.source(sources.files(p.args["input"], format="jsonl",
                                   batch_size=int(p.args.get("batch_size", 50))),
                     watermarks=watermarks.bounded_out_of_orderness(
                         "ts", max_delay=p.args.get("max_delay", "25s")))
             .map_batches(slowly))


def build(p: Pipeline) -> None:
    (_clicks(p)
      .key_by("user")
      .window(windows.session(gap=p.args.get("gap", "30s")))
      .aggregate(n="count", total=("sum", "amount"))
      .sink(sinks.files(p.args["output"], format="jsonl")))


class SessionsByHand:
    """``process`` and ``on_timer`` of :func:`build_with_timers`, for a gap in ms."""

    def __init__(self, gap_ms: int) -> None:
        self.gap = gap_ms

    def on_click(self, click: dict[str, Any], ctx: Any) -> None:
        """Park the click until event time reaches it."""
        waiting = ctx.map_state("waiting")
        waiting.put(ctx.timestamp, [*waiting.get(ctx.timestamp, []), click["amount"]])
        ctx.timers.register_event_time(ctx.timestamp)

    def on_timer(self, timestamp: int, ctx: Any) -> list[dict[str, Any]]:
        """Event time reached ``timestamp``: the clicks of that time, in order, or the
        end of the open session."""
        session = ctx.value_state("open")
        waiting = ctx.map_state("waiting")
        current = session.value()
        amounts = waiting.get(timestamp)
        out = []
        if current is not None:
            end = current["last"] + self.gap  # the first millisecond after the session
            # Its last millisecond passed without a click, or a click came after it.
            if timestamp >= end or (amounts is None and timestamp == end - 1):
                out.append(self._end(current, ctx))
                session.clear()
                current = None
        if amounts is None:
            return out
        waiting.remove(timestamp)
        if current is None:
            current = {"start": timestamp, "last": timestamp, "n": 0, "total": 0}
        # The session's previous end-of-session timer stays: when it comes, the
        # session has moved on and it does nothing. (Deleting it could delete a
        # click's timer too: a key has one timer per time, whoever registered it.)
        session.update({"start": current["start"], "last": timestamp,
                        "n": current["n"] + len(amounts),
                        "total": current["total"] + sum(amounts)})
        ctx.timers.register_event_time(timestamp + self.gap - 1)
        return out

    def _end(self, done: dict[str, Any], ctx: Any) -> dict[str, Any]:
        number = ctx.value_state("sessions", ttl="24h")
        count = number.value(0) + 1
        number.update(count)
        return {"user": ctx.key, "window_start": done["start"],
                "window_end": done["last"] + self.gap, "n": done["n"], "total": done["total"],
                "session": count}


def build_with_timers(p: Pipeline) -> None:
    by_hand = SessionsByHand(duration_ms(p.args.get("gap", "30s"), what="gap"))
    (_clicks(p)
      .key_by("user")
      .process(by_hand.on_click, on_timer=by_hand.on_timer)
      .sink(sinks.files(p.args["output"], format="jsonl")))
