"""The running sum of ``crashing_jobs``, written into a Delta table by ``sinks.delta``:
every key's running sum after each record, so a lost or repeated row shows."""

from __future__ import annotations

from typing import Any

from crashing_jobs import KEYS, _crash_once, _source

from job_runtime import Pipeline, sinks


def running_sum(p: Pipeline) -> None:
    def add(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {"key": a["key"], "value": a["value"] + b["value"]}

    mode = p.args.get("mode", "append")
    (_source(p)
     .map(_crash_once(p))
     .map(lambda r: {"key": r["seq"] % KEYS, "value": r["seq"]})
     .key_by("key")
     .reduce(add, name="sums")
     .sink(sinks.delta(p.args["table"], mode=mode,
                       **({"key": "key"} if mode == "merge" else {}))))
