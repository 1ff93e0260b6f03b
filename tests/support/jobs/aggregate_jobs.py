"""A keyed ``aggregate`` (with its combiner before the exchange) whose subtask may die once.

Per key ``seq % KEYS`` it counts the records and sums, minimises and maximises
``seq``; ``expected`` gives what the committed output must end with. An optional
pause after each output batch slows the keyed stage, so that data queues in front
of it and unaligned barriers overtake it (channel state).
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
from crashing_jobs import _crash_once, _source

from job_runtime import Pipeline, sinks

KEYS = 97


def counted(p: Pipeline) -> None:
    pause = float(p.args.get("pause", 0.0))

    def slow(batch: pa.RecordBatch) -> pa.RecordBatch:
        if pause:
            time.sleep(pause)
        return batch

    (_source(p)
     .map(_crash_once(p))
     .map(lambda r: {"key": r["seq"] % KEYS, "value": r["seq"]})
     .key_by("key")
     .aggregate(n="count", total=("sum", "value"), low=("min", "value"),
                high=("max", "value"))
     .map_batches(slow)
     .sink(sinks.files(p.args["output"], format="jsonl")))


def expected(count: int) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for seq in range(count):
        row = out.setdefault(seq % KEYS, {"n": 0, "total": 0.0, "low": seq, "high": seq})
        row["n"] += 1
        row["total"] += seq
        row["high"] = seq
    return out


def problems(records: list[dict[str, Any]], *, count: int) -> list[str]:
    """Empty when the output ends with every key's exact aggregates and never overshoots.

    Counts only grow, so the largest count committed for a key is its last one:
    a lost record leaves it short, a record counted twice pushes it past.
    """
    final: dict[int, dict[str, Any]] = {}
    for record in records:
        key = int(record["key"])
        if key not in final or record["n"] >= final[key]["n"]:
            final[key] = record
    found = []
    for key, want in expected(count).items():
        got = final.get(key)
        if got is None:
            found.append(f"key {key}: no output")
            continue
        for field in ("n", "total", "low", "high"):
            if float(got[field]) != float(want[field]):
                found.append(f"key {key}: {field} {got[field]}, expected {want[field]}")
    return found
