"""The joins benchmark's job: views joined with buys of the same user within an
interval of event time (``bench.joins_job:views_and_buys``).

``p.args``: ``input`` (the folder of Parquet files, the windows benchmark's input),
``output`` (the files sink's folder), ``max_delay`` (the watermark's bound on
disorder, default ``"5s"``), ``upper_ms`` (how long after a view a buy still pairs
with it, default :data:`UPPER_MS`) and ``batch_size`` (rows per source batch, default
65,536).

The input is one stream of ``user, amount, ts``; a record with an even ``amount`` is a
view, one with an odd ``amount`` a buy. Ours reads the folder twice, once per side
(two sources of the same files, each keeping its half), as Structured Streaming's side
does with two readers: both count every record they read, so both rates are records
read, by both sides, per second. A pair is a view at ``t`` and a buy of its user at
``s`` with ``t <= s <= t + upper_ms``; its row is ``user, ts, view_amount, buy_ts,
buy_amount`` (``ts`` the view's).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from job_runtime import Pipeline, sinks, sources, watermarks

UPPER_MS = 10_000
"""A buy pairs with the views of its user from ``UPPER_MS`` before it up to its time."""
OUTPUT_COLUMNS = ("user", "ts", "view_amount", "buy_ts", "buy_amount")


def views(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The records with an even ``amount``, as ``user, ts, view_amount``."""
    kept = batch.filter(pc.equal(pc.bit_wise_and(batch.column("amount"), 1), 0))
    return pa.RecordBatch.from_arrays(
        [kept.column("user"), kept.column("ts"), kept.column("amount")],
        names=["user", "ts", "view_amount"])


def buys(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The records with an odd ``amount``, as ``user, ts, buy_ts, buy_amount`` (the
    event-time column is named alike on both sides; ``buy_ts`` keeps it in the pair)."""
    kept = batch.filter(pc.equal(pc.bit_wise_and(batch.column("amount"), 1), 1))
    return pa.RecordBatch.from_arrays(
        [kept.column("user"), kept.column("ts"), kept.column("ts"), kept.column("amount")],
        names=["user", "ts", "buy_ts", "buy_amount"])


def views_and_buys(p: Pipeline) -> None:
    """``connect`` and the vectorised ``interval_join`` (its default joined record) into
    the exactly-once Parquet files sink."""
    def source() -> sources.Source:
        return sources.files(str(p.args["input"]), format="parquet",
                             batch_size=int(p.args.get("batch_size", 65536)))

    strategy = watermarks.bounded_out_of_orderness(
        "ts", max_delay=str(p.args.get("max_delay", "5s")))
    upper = int(p.args.get("upper_ms", UPPER_MS))
    seen = p.source(source(), watermarks=strategy).map_batches(views, name="views")
    bought = p.source(source(), watermarks=strategy).map_batches(buys, name="buys")
    (seen.key_by("user").connect(bought.key_by("user"))
         .interval_join(lower="0ms", upper=f"{upper}ms", name="views-buys")
         .sink(sinks.files(str(p.args["output"]), format="parquet")))
