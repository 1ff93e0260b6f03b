"""A job that runs until it is cancelled: a steady, rate-limited keyed count into files."""

from __future__ import annotations

from job_runtime import Pipeline, sinks, sources


def build(p: Pipeline) -> None:
    (p.source(sources.sequence(count=10**12, rate=float(p.args.get("rate", 20000)), splits=1))
      .map(lambda r: {"key": r["seq"] % 97, "value": 1})
      .key_by("key")
      .reduce(lambda a, b: {"key": a["key"], "value": a["value"] + b["value"]})
      .sink(sinks.files(p.args["output"], format="jsonl")))
