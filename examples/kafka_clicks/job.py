"""Per-user click counts from one Kafka topic to another, exactly once.

Reads JSON click events (``{"user": ..., "page": ..., "ts": ...}``) from ``input``,
keeps a running count per user, and writes each new count as ``{"user", "clicks"}``
keyed by the user to ``output`` with the exactly-once Kafka sink: a ``read_committed``
reader of ``output`` sees every count once, however often the job is killed.

Arguments: ``bootstrap`` (default ``$KAFKA_BOOTSTRAP``, which ``python -m e2e.kafka up``
prints), ``input`` (default ``clicks``), ``output`` (default ``click-counts``),
``bounded`` (stop at the input's end at the first start; default false: run forever),
``delay`` (seconds per click, to watch it work or let a kill land mid-run),
``partition_discovery`` (seconds between looks for partitions added to ``input``;
default: the source's), and ``window``: a duration (``10s``, ``1m``) to count clicks
per user and tumbling window of event time (``ts``) instead, one record
``{"user", "window_start", "window_end", "n"}`` per window once the watermark passed
its end (``max_delay``, default ``5s``, is how far out of order clicks may come).
"""

from __future__ import annotations

import os
import time
from typing import Any

from job_runtime import Pipeline, sinks, sources, watermarks, windows


def count(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {"user": a["user"], "clicks": a["clicks"] + b["clicks"]}


def build(p: Pipeline) -> None:
    bootstrap = p.args.get("bootstrap") or os.environ.get("KAFKA_BOOTSTRAP")
    if not bootstrap:
        raise ValueError("set the job's bootstrap argument or KAFKA_BOOTSTRAP "
                         "(python -m e2e.kafka up prints one)")
    delay = float(p.args.get("delay", 0.0))

    def one_click(click: dict[str, Any]) -> dict[str, Any]:
        if delay:
            time.sleep(delay)
        return {"user": click["user"], "clicks": 1}

    discovery = p.args.get("partition_discovery")
    source = sources.kafka(p.args.get("input", "clicks"), bootstrap, value_format="json",
                           bounded=bool(p.args.get("bounded", False)), batch_size=100,
                           **({} if discovery is None else
                              {"partition_discovery": float(discovery)}))
    output = sinks.kafka(p.args.get("output", "click-counts"), bootstrap, key="user")
    if p.args.get("window"):
        def stamped_click(click: dict[str, Any]) -> dict[str, Any]:
            if delay:
                time.sleep(delay)
            return {"user": click["user"], "ts": click["ts"]}

        (p.source(source, watermarks=watermarks.bounded_out_of_orderness(
                      "ts", max_delay=p.args.get("max_delay", "5s")))
          .map(stamped_click)
          .key_by("user")
          .window(windows.tumbling(p.args["window"]))
          .aggregate(n="count")
          .sink(output))
        return
    (p.source(source)
      .map(one_click)
      .key_by("user")
      .reduce(count)
      .sink(output))
