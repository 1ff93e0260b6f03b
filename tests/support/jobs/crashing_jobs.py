"""Jobs for recovery tests: a per-key running sum (or an echo) whose subtask may die once.

``crash_at``/``crash_marker`` make the ``map`` SIGKILL its own Python worker when
it meets record ``crash_at``, as a crashed executor would, but only the first
time: the marker file remembers it across Spark's relaunch of the stage.
``hang_at``/``hang_marker`` make it block forever there instead, once;
``crash_always`` makes it die at ``crash_at`` on every relaunch.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from job_runtime import Pipeline, Stream, sinks, sources

KEYS = 97


def _source(p: Pipeline) -> Stream:
    rate = p.args.get("rate")
    return p.source(sources.sequence(count=int(p.args["count"]),
                                     rate=float(rate) if rate else None))


def first_to_claim(marker: str) -> bool:
    """Create ``marker``; whether this call did (only one process ever does): what makes
    a fault happen once, in the first attempt that reaches it."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _crash_once(p: Pipeline) -> Callable[[dict[str, Any]], dict[str, Any]]:
    marker = p.args.get("crash_marker")
    crash_at = int(p.args.get("crash_at", -1))
    hang_marker = p.args.get("hang_marker")
    hang_at = int(p.args.get("hang_at", -1))

    always = bool(p.args.get("crash_always"))

    def maybe_crash(record: dict[str, Any]) -> dict[str, Any]:
        if always and record["seq"] == crash_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if marker and record["seq"] == crash_at:
            if not first_to_claim(marker):
                return record
            os.kill(os.getpid(), signal.SIGKILL)
        if hang_marker and record["seq"] == hang_at and first_to_claim(hang_marker):
            while True:  # a function that never returns, as a deadlock would
                time.sleep(1.0)
        return record

    return maybe_crash


def running_sum(p: Pipeline) -> None:
    """Emits every key's running sum of ``seq`` after each record (what verify() checks)."""
    _running_sum(p, _source(p))


def dataframe_running_sum(p: Pipeline) -> None:
    """The running sum over a Spark DataFrame of ``seq`` (the ``dataframe`` source)."""
    count = int(p.args["count"])
    source = sources.dataframe(
        lambda spark: spark.range(count, numPartitions=3).withColumnRenamed("id", "seq"),
        name="numbers", batch_size=50)
    _running_sum(p, p.source(source))


def _running_sum(p: Pipeline, stream: Stream) -> None:
    delay = float(p.args.get("reduce_delay", 0.0))

    def add(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        if delay:
            time.sleep(delay)
        return {"key": a["key"], "value": a["value"] + b["value"]}

    (stream
     .map(_crash_once(p))
     .map(lambda r: {"key": r["seq"] % KEYS, "value": r["seq"]})
     .key_by("key")
     .reduce(add, name=p.args.get("reduce_name"))
     .sink(sinks.files(p.args["output"], format="jsonl")))


def echo(p: Pipeline) -> None:
    """Emits each record once per time it is processed, through a keyed exchange."""

    def forward(record: dict[str, Any], ctx: Any) -> list[dict[str, Any]]:
        seen = ctx.value_state("seen")
        seen.update(seen.value(0) + 1)
        return [{"key": record["key"], "seq": record["seq"]}]

    (_source(p)
     .map(_crash_once(p))
     .map(lambda r: {"key": r["seq"] % KEYS, "seq": r["seq"]})
     .key_by("key")
     .process(forward)
     .sink(sinks.files(p.args["output"], format="jsonl")))
