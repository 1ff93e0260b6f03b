"""The running sum of ``crashing_jobs``, written into a table by ``sinks.delta`` or
``sinks.iceberg`` (``format``): every key's running sum after each record, so a lost
or repeated row shows; ``mode="merge"`` keeps each key's latest sum."""

from __future__ import annotations

from typing import Any

from crashing_jobs import KEYS, _crash_once, _source

from job_runtime import Pipeline, sinks
from job_runtime.sinks.sink_contract import Sink


def table_sink(p: Pipeline) -> Sink:
    mode = p.args.get("mode", "append")
    key = {"key": "key"} if mode == "merge" else {}
    if p.args.get("format", "delta") == "iceberg":
        return sinks.iceberg("lake.sums", warehouse=p.args["table"], mode=mode, **key)
    return sinks.delta(p.args["table"], mode=mode, **key)


def running_sum(p: Pipeline) -> None:
    def add(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {"key": a["key"], "value": a["value"] + b["value"]}

    (_source(p)
     .map(_crash_once(p))
     .map(lambda r: {"key": r["seq"] % KEYS, "value": r["seq"]})
     .key_by("key")
     .reduce(add, name="sums")
     .sink(table_sink(p)))
