"""The kafka benchmark's job: click events from a Kafka topic, a count per user, exactly
once into another topic (``bench.kafka_job:user_counts``).

``p.args``: ``bootstrap``, ``input``, ``output`` (topic names) and ``bounded`` (stop at
the input's end at the first start: the throughput run; unbounded for the latency run).
Each output record is ``{"user", "n", "last_ts"}``: the user's count so far and the
newest produce time among its records, which the benchmark's latency is read from.
"""

from __future__ import annotations

from job_runtime import Pipeline, sinks, sources


def user_counts(p: Pipeline) -> None:
    """``key_by("user").aggregate(n="count", last_ts=("max", "ts"))`` into the
    exactly-once Kafka sink, keyed by the user."""
    bootstrap = str(p.args["bootstrap"])
    source = sources.kafka(str(p.args["input"]), bootstrap, value_format="json",
                           bounded=bool(p.args.get("bounded", True)))
    (p.source(source)
      .key_by("user")
      .aggregate(n="count", last_ts=("max", "ts"))
      .sink(sinks.kafka(str(p.args["output"]), bootstrap, key="user")))
