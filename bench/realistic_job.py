"""The realistic benchmark's job: count, sum and mean of ``amount`` per string ``user``
over a folder of Parquet or JSON-lines files (``bench.realistic_job:per_user_totals``).

``p.args``: ``input`` (the folder of files), ``format`` (``parquet`` or ``jsonl``) and
``output`` (the files sink's folder). The source's batch size is the pipeline's own
choice. Each output row is ``user, n, total, avg``: the key's aggregates whenever an
update of it is emitted, written to the exactly-once Parquet files sink.
"""

from __future__ import annotations

from job_runtime import Pipeline, sinks, sources


def per_user_totals(p: Pipeline) -> None:
    """``key_by("user").aggregate(n="count", total=("sum", "amount"), avg=("mean",
    "amount"))`` from the files into the Parquet files sink."""
    source = sources.files(str(p.args["input"]), format=str(p.args.get("format", "parquet")))
    (p.source(source)
     .key_by("user")
     .aggregate(n="count", total=("sum", "amount"), avg=("mean", "amount"))
     .sink(sinks.files(str(p.args["output"]), format="parquet")))
