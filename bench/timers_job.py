"""The timers benchmark's job: an inactivity alert per user from event-time timers
(``bench.timers_job:inactivity_alerts``).

``p.args``: ``input`` (the folder of Parquet files), ``output`` (the files sink's
folder), ``max_delay`` (the watermark's bound on disorder, default ``"5s"``), ``gap_ms``
(the inactivity that raises an alert, default 30 s) and ``batch_size`` (rows per source
batch, default 65,536, as the windows job).

What an alert is, on both sides of the benchmark alike: a user's activity is a run of
records whose event times, in event-time order, lie less than ``gap_ms`` apart; when
the watermark passes ``gap_ms`` after its newest record, one row ``user, alert_at,
n, total`` (``alert_at`` = that newest event time + ``gap_ms``, ``n`` and ``total`` the
run's count and sum of ``amount``) and the run's state is gone.

Why a list of runs per user and not one count and sum: the stream is out of order, so
a record at or past the pending alert time can arrive before the watermark has passed
it (a source subtask ahead of the other, or, on Structured Streaming's side, a whole
micro-batch of records ahead of its watermark). Folding such a record into the pending
run would make the output depend on when each engine's watermark happens to move; it
starts a run of its own instead, and a later record may still join two runs. Each run
has its own timer; a run's timer moves (deleted, registered anew) when a record extends
its newest event time. No record is late (the disorder is under the watermark delay),
so no record can belong to a run whose timer already fired: the alerts are exactly the
runs of the whole input, which the benchmark's reference computes.
"""

from __future__ import annotations

from typing import Any

from job_runtime import Pipeline, sinks, sources, watermarks

GAP_MS = 30_000
"""Inactivity, in event time, after a user's newest record that raises the alert."""
STATE = "runs"
"""The value state: the user's open runs (:data:`Run`), by ``lo``."""


Run = tuple[int, int, int, int]
"""``(lo, hi, n, total)``: a run's oldest and newest event time, count and sum."""


class InactivityAlerts:
    """``process(on_record, on_timer=on_timer)`` with the gap as a parameter.

    The state is a tuple of runs ordered by ``lo``, replaced on every change (state
    values are immutable: a snapshot may still hold the old one). The timer of a run is
    at ``hi + gap``, and event-time timers are unique per key and time, so a fired
    timer names its run.
    """

    def __init__(self, gap_ms: int = GAP_MS) -> None:
        self.gap = gap_ms

    def on_record(self, record: dict[str, Any], ctx: Any) -> None:
        state = ctx.value_state(STATE)
        runs: tuple[Run, ...] | None = state.value()
        ts: int = ctx.timestamp
        amount: int = record["amount"]
        gap = self.gap
        if runs is None:
            state.update(((ts, ts, 1, amount),))
            ctx.timers.register_event_time(ts + gap)
            return None
        if len(runs) == 1:
            lo, hi, n, total = runs[0]
            if lo - gap < ts < hi + gap:  # the common case: within the one run
                if ts > hi:
                    ctx.timers.delete_event_time(hi + gap)
                    ctx.timers.register_event_time(ts + gap)
                state.update(((min(lo, ts), max(hi, ts), n + 1, total + amount),))
                return None
        state.update(self._merge(runs, ts, amount, ctx.timers))
        return None

    def _merge(self, runs: tuple[Run, ...], ts: int, amount: int,
               timers: Any) -> tuple[Run, ...]:
        """``runs`` with the record added: a run of its own, or the runs it is within a
        gap of, merged into one (a record can join two runs)."""
        gap = self.gap
        joined = [r for r in runs if r[0] - gap < ts < r[1] + gap]
        kept = [r for r in runs if not r[0] - gap < ts < r[1] + gap]
        merged = (min([ts, *(r[0] for r in joined)]), max([ts, *(r[1] for r in joined)]),
                  1 + sum(r[2] for r in joined), amount + sum(r[3] for r in joined))
        for run in joined:
            if run[1] != merged[1]:
                timers.delete_event_time(run[1] + gap)
        if all(run[1] != merged[1] for run in joined):
            timers.register_event_time(merged[1] + gap)
        return tuple(sorted([*kept, merged]))

    def on_timer(self, timestamp: int, ctx: Any) -> list[dict[str, Any]]:
        state = ctx.value_state(STATE)
        runs: tuple[Run, ...] = state.value() or ()
        due = [r for r in runs if r[1] + self.gap == timestamp]
        rest = tuple(r for r in runs if r[1] + self.gap != timestamp)
        if rest:
            state.update(rest)
        else:
            state.clear()
        return [{"user": ctx.key, "alert_at": timestamp, "n": r[2], "total": r[3]}
                for r in due]


def inactivity_alerts(p: Pipeline) -> None:
    """``key_by("user").process(on_record, on_timer=on_timer)`` into the exactly-once
    Parquet files sink."""
    source = sources.files(str(p.args["input"]), format="parquet",
                           batch_size=int(p.args.get("batch_size", 65536)))
    strategy = watermarks.bounded_out_of_orderness(
        "ts", max_delay=str(p.args.get("max_delay", "5s")))
    alerts = InactivityAlerts(int(p.args.get("gap_ms", GAP_MS)))
    (p.source(source, watermarks=strategy)
      .key_by("user")
      .process(alerts.on_record, on_timer=alerts.on_timer, name="inactivity")
      .sink(sinks.files(str(p.args["output"]), format="parquet")))
