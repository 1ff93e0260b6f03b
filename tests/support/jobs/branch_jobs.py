"""Jobs that branch, for the runtime tests: a keyed operator's stream goes to its main
sink and, through ``side_output(tag)``, to sinks of its own, every one exactly once in
the same checkpoint. They read the clicks of the clicks-per-minute example's format
(``examples/clicks_per_minute/clicks.py`` writes them), with the knobs of
:mod:`window_jobs`: a pause per batch, and a subtask that kills itself once at a
given click (``pause``, ``crash_at``, ``crash_marker``).
"""

from __future__ import annotations

from typing import Any

from window_jobs import slow_or_crash

from job_runtime import Pipeline, Stream, sinks, sources, watermarks, windows

SUMMARY_AT = 2**62
"""An event time after every click: a timer there fires when the bounded input ends."""


def _clicks(p: Pipeline) -> Stream:
    strategy = watermarks.bounded_out_of_orderness("ts", max_delay=p.args.get("max_delay", "5s"))
    return (p.source(sources.files(p.args["input"], format="jsonl",
                                   batch_size=int(p.args.get("batch_size", 500))),
                     watermarks=strategy)
             .map_batches(slow_or_crash(p)))


def late_routed(p: Pipeline) -> None:
    """The clicks per user and tumbling window of ``size`` (default 10s) of
    :func:`window_jobs.per_window` to ``output``; the clicks too late for their window
    to ``late_output``."""
    counted = (_clicks(p)
               .key_by("user")
               .window(windows.tumbling(p.args.get("size", "10s")),
                       allowed_lateness=p.args.get("allowed_lateness", 0))
               .aggregate(n="count", total=("sum", "amount")))
    counted.sink(sinks.files(p.args["output"], format="jsonl"))
    (counted.side_output(windows.late_data())
            .sink(sinks.files(p.args["late_output"], format="jsonl"), name="late"))


def process_side_output(p: Pipeline) -> None:
    """Numbers each user's clicks (``n``, from 1, in keyed state) to ``output``; the
    numbered clicks of an ``amount`` of at least ``big_at`` (default 90) also to
    ``big_output``, and, when the input ends, each user's count of clicks (from a
    timer) to ``totals_output``."""
    big_at = int(p.args.get("big_at", 90))

    def number(click: dict[str, Any], ctx: Any) -> list[dict[str, Any]]:
        seen = ctx.value_state("seen")
        n = seen.value(0) + 1
        seen.update(n)
        if n == 1:
            ctx.timers.register_event_time(SUMMARY_AT)
        numbered = {"seq": click["seq"], "user": click["user"], "amount": click["amount"],
                    "n": n}
        if click["amount"] >= big_at:
            ctx.output("big", numbered)
        return [numbered]

    def summary(timestamp: int, ctx: Any) -> None:
        ctx.output("totals", {"user": ctx.key, "clicks": ctx.value_state("seen").value(0)})

    numbered = _clicks(p).key_by("user").process(number, on_timer=summary)
    numbered.sink(sinks.files(p.args["output"], format="jsonl"))
    (numbered.side_output("big")
             .map(lambda r: {"seq": r["seq"], "user": r["user"], "n": r["n"],
                             "big": r["amount"]})
             .sink(sinks.files(p.args["big_output"], format="jsonl"), name="big"))
    (numbered.side_output("totals")
             .sink(sinks.files(p.args["totals_output"], format="jsonl"), name="totals"))
