"""A job whose ``map`` raises on one record: a bug in user code, not a crash."""

from __future__ import annotations

from typing import Any

from job_runtime import Pipeline, sinks, sources


class BadRecordError(Exception):
    """What the user's function raises."""


def parse(record: dict[str, Any]) -> dict[str, Any]:
    if record["seq"] == 1234:
        raise BadRecordError(f"cannot parse record {record['seq']}")
    return {"key": record["seq"] % 7, "value": record["seq"]}


def build(p: Pipeline) -> None:
    (p.source(sources.sequence(count=int(p.args["count"]), rate=float(p.args["rate"])))
     .map(parse)
     .key_by("key")
     .reduce(lambda a, b: {"key": a["key"], "value": a["value"] + b["value"]})
     .sink(sinks.files(p.args["output"], format="jsonl")))
