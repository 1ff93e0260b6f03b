"""Orders joined with their payments within 10 minutes, into a Delta table, exactly once.

Two inputs with event time (``ts``): ``orders`` and ``payments``, each keyed by
``order_id`` and connected; ``interval_join`` pairs an order with every payment from
the order's time to 10 minutes after it, and ``sinks.delta`` appends each pair to the
table at ``output``, one commit per checkpoint interval and subtask. Payments too late
to pair go to ``late`` files.

Arguments: ``orders``, ``payments`` (input folders, from ``data.py``), ``output`` (the
Delta table), ``late`` (a folder), ``delay_ms`` (per order, to let a kill land mid-run).
"""

from __future__ import annotations

import time
from typing import Any

from job_runtime import Pipeline, sinks, sources, watermarks

WITHIN = "10m"


def paid(order: dict[str, Any], payment: dict[str, Any]) -> dict[str, Any]:
    return {"order_id": order["order_id"], "customer": order["customer"],
            "ordered_at": order["ts"], "paid_at": payment["ts"],
            "amount": payment["amount"]}


def build(p: Pipeline) -> None:
    delay = float(p.args.get("delay_ms", 0)) / 1000.0

    def slowly(order: dict[str, Any]) -> dict[str, Any]:
        if delay:
            time.sleep(delay)
        return order

    events = watermarks.bounded_out_of_orderness("ts", max_delay="1m")
    orders = p.source(sources.files(p.args["orders"], format="jsonl", batch_size=50),
                      watermarks=events)
    payments = p.source(sources.files(p.args["payments"], format="jsonl", batch_size=50),
                        watermarks=events)
    joined = (orders.map(slowly).key_by("order_id")
              .connect(payments.key_by("order_id"))
              .interval_join(lower="0s", upper=WITHIN, fn=paid, name="paid-orders"))
    joined.sink(sinks.delta(p.args["output"]))
    joined.side_output("late").sink(sinks.files(p.args["late"], format="jsonl"),
                                    name="late")
