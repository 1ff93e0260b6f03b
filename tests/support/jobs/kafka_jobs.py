"""Jobs that read Kafka with ``sources.kafka`` (tests/job_runtime/kafka/).

``bounded_copy`` writes each JSON record's ``n`` with its topic, partition and offset,
so a test sees a lost or a duplicated record; ``delay`` seconds per record stretch the run
over several checkpoints.
"""

from __future__ import annotations

import time
from typing import Any

from job_runtime import Pipeline, sinks, sources, watermarks, windows


def bounded_copy(p: Pipeline) -> None:
    """``topic`` (or a list, ``topics``) copied with each record's topic, partition and
    offset; bounded unless ``bounded`` is false; ``start`` and ``partition_discovery``
    as the source takes them."""
    delay = float(p.args.get("delay", 0.0))

    def copy(record: dict[str, Any]) -> dict[str, Any]:
        if delay:
            time.sleep(delay)
        return {"n": record["n"], "topic": record["topic"], "partition": record["partition"],
                "offset": record["offset"]}

    source = sources.kafka(p.args.get("topics") or p.args["topic"], p.args["bootstrap"],
                           bounded=bool(p.args.get("bounded", True)),
                           start=p.args.get("start", "earliest"),
                           partition_discovery=float(p.args.get("partition_discovery", 60.0)),
                           value_format="json", batch_size=int(p.args.get("batch_size", 100)),
                           timeout=float(p.args.get("timeout", 30.0)))
    p.source(source).map(copy).sink(sinks.files(p.args["output"], format="jsonl"))


def paced_numbers_to_kafka(p: Pipeline) -> None:
    """``count`` records ``{"n": i}`` at ``rate`` per second into the Kafka topic
    ``output`` through the exactly-once sink (markers in ``control``): a source that
    never needs the broker, so the job runs on while the broker is away."""
    source = sources.sequence(int(p.args["count"]), rate=float(p.args["rate"]), splits=2)
    sink = sinks.kafka(p.args["output"], p.args["bootstrap"], control_topic=p.args["control"])
    p.source(source).map(lambda r: {"n": r["seq"]}).sink(sink)


def windowed_counts(p: Pipeline) -> None:
    """Clicks per user in 1 s event-time windows of an unbounded topic; ``idle_after``
    lets a partition without records stop holding the windows back."""
    idle_after = p.args.get("idle_after")
    source = sources.kafka(p.args["topic"], p.args["bootstrap"], value_format="json")
    (p.source(source, watermarks=watermarks.bounded_out_of_orderness(
        "ts", max_delay="200ms", idle_after=idle_after))
      .key_by("user")
      .window(windows.tumbling("1s"))
      .aggregate(n="count")
      .sink(sinks.files(p.args["output"], format="jsonl")))



def copy_to_kafka(p: Pipeline) -> None:
    """``topic`` (bounded) copied to the Kafka topic ``output`` through the exactly-once
    sink; the record whose ``n`` is ``poison`` gets a value of 3 MB, over every default
    size limit; ``bad_records`` and ``dead_letter_topic`` as the sink takes them."""
    poison = int(p.args.get("poison", -1))

    def copy(record: dict[str, Any]) -> dict[str, Any]:
        copied = {"n": record["n"], "user": record.get("user", "")}
        if record["n"] == poison:
            copied["blob"] = "x" * 3_000_000
        return copied

    source = sources.kafka(p.args["topic"], p.args["bootstrap"], bounded=True,
                           value_format="json", batch_size=100)
    dead_letters = p.args.get("dead_letter_topic")
    sink = sinks.kafka(p.args["output"], p.args["bootstrap"], key="user",
                       control_topic=p.args["control"],
                       bad_records="dead-letter" if dead_letters else "fail",
                       dead_letter_topic=dead_letters)
    p.source(source).map(copy).sink(sink)
