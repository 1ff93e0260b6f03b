"""A per-key running sum over a deterministic sequence (the minimal API)."""

from job_runtime import Pipeline, sinks, sources


def build(p: Pipeline) -> None:
    count = int(p.args.get("count", 200_000))
    rate = p.args.get("rate")
    (p.source(sources.sequence(count=count, rate=float(rate) if rate else None))
      .map(lambda r: {"key": r["seq"] % 97, "value": r["seq"]})
      .key_by("key")
      .reduce(lambda a, b: {"key": a["key"], "value": a["value"] + b["value"]})
      .sink(sinks.files(p.args["output"], format="jsonl")))
