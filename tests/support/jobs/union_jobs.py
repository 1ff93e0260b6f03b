"""A job that unions two sources, for the runtime tests: the clicks of the
clicks-per-minute example's format from two folders (``input`` and ``second_input``),
each with its own record function, counted per user and window as
:func:`window_jobs.per_window` counts one folder's.
"""

from __future__ import annotations

from typing import Any

from window_jobs import slow_or_crash

from job_runtime import Pipeline, sinks, sources, watermarks, windows


def per_window_of_two(p: Pipeline) -> None:
    """The first folder's clicks through the knobs of :func:`window_jobs.slow_or_crash`
    (a pause per batch, a subtask killed once), the second's through a ``map`` that
    keeps the columns the window reads; both with event time on ``ts`` (the second
    with a longer delay), then one window per user and ``size``."""

    def keep(click: dict[str, Any]) -> dict[str, Any]:
        return {"seq": click["seq"], "user": click["user"], "ts": click["ts"],
                "amount": click["amount"]}

    batch_size = int(p.args.get("batch_size", 500))
    first = (p.source(sources.files(p.args["input"], format="jsonl", batch_size=batch_size),
                      watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="5s"))
             .map_batches(slow_or_crash(p)))
    second = (p.source(sources.files(p.args["second_input"], format="jsonl",
                                     batch_size=batch_size),
                       watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="8s"))
              .map(keep))
    (first.union(second)
     .key_by("user")
     .window(windows.tumbling(p.args.get("size", "10s")))
     .aggregate(n="count", total=("sum", "amount"))
     .sink(sinks.files(p.args["output"], format="jsonl")))
