"""Orders joined with their payments, from two JSON-lines inputs, into files, by one of
the three ways two keyed streams meet (``kind``): ``interval`` (``interval_join``,
within an interval of event time), ``window`` (``window_join``, in the same tumbling
window) and ``process`` (``connect(...).process``: the user's function, the order and
its payments in the key's state, shared by both sides). A subtask may die once, and
``delay_ms`` per order keeps the job running long enough for a kill to land."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

from crashing_jobs import first_to_claim

from job_runtime import Pipeline, sinks, sources, watermarks, windows

LOWER_MS = -1_000
UPPER_MS = 5_000
WINDOW_MS = 4_000
KINDS = ("interval", "window", "process")


def write_inputs(base: Path, *, orders: int, seed: int = 11) -> None:
    """``orders/`` and ``payments/``: each order at its time, and 0 to 2 payments from
    3 s before it to 8 s after (some inside the join's interval, some outside), both
    in time order, in four files each."""
    rng = random.Random(seed)
    order_rows, payment_rows = [], []
    for order in range(orders):
        ts = 1_000_000 + order * 20
        order_rows.append({"order_id": order, "ts": ts, "item": f"item-{order % 13}"})
        for _ in range(rng.randrange(3)):
            payment_rows.append({"order_id": order, "ts": ts + rng.randrange(-3_000, 8_000),
                                 "amount": round(rng.uniform(1, 100), 2)})
    payment_rows.sort(key=lambda r: r["ts"])
    # Each file a stretch of time: a file read later holds later records, as a job's
    # input usually does. (Files that each span all of it would make the records of a
    # file not started yet late: a split's watermark counts once it is read.)
    for name, rows in (("orders", order_rows), ("payments", payment_rows)):
        folder = base / name
        folder.mkdir(parents=True, exist_ok=True)
        size = -(-len(rows) // 4)
        for part in range(4):
            chunk = rows[part * size:(part + 1) * size]
            (folder / f"part-{part}.jsonl").write_text(
                "".join(json.dumps(r) + "\n" for r in chunk))


def reference(base: Path, *, kind: str = "interval") -> list[tuple[int, int, int]]:
    """``(order, ordered, paid)`` of every pair the join of ``kind`` must emit, computed
    in one go."""
    def read(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for path in sorted((base / name).glob("*.jsonl"))
                for line in path.read_text().splitlines()]

    def pairs(ordered: int, paid: int) -> bool:
        if kind == "window":
            return ordered // WINDOW_MS == paid // WINDOW_MS
        if kind == "process":
            return True
        return LOWER_MS <= paid - ordered <= UPPER_MS

    by_order: dict[int, list[int]] = {}
    for payment in read("payments"):
        by_order.setdefault(payment["order_id"], []).append(payment["ts"])
    return sorted((o["order_id"], o["ts"], paid) for o in read("orders")
                  for paid in by_order.get(o["order_id"], []) if pairs(o["ts"], paid))


def pair(o: dict[str, Any], pay: dict[str, Any]) -> dict[str, Any]:
    return {"order": o["order_id"], "ordered": o["ts"], "paid": pay["ts"],
            "amount": pay["amount"]}


def pair_in_state(record: dict[str, Any], ctx: Any) -> list[dict[str, Any]]:
    """The co-process join: an order waits in the key's value state, payments that came
    first in its map state; each pair once, whichever side came first."""
    order, waiting = ctx.value_state("order"), ctx.map_state("payments")
    if ctx.input == 0:
        order.update(record)
        early = [pair(record, pay) for _, pay in sorted(waiting.items())]
        waiting.clear()
        return early
    if order.value() is None:
        waiting.put(len(list(waiting.keys())), record)
        return []
    return [pair(order.value(), record)]


def joined(p: Pipeline) -> None:
    marker, crash_at = p.args.get("crash_marker"), int(p.args.get("crash_at", -1))
    delay = float(p.args.get("delay_ms", 0)) / 1000.0

    def maybe_crash(record: dict[str, Any]) -> dict[str, Any]:
        if delay:
            time.sleep(delay)
        if marker and record["order_id"] == crash_at and first_to_claim(marker):
            os.kill(os.getpid(), signal.SIGKILL)
        return record

    events = watermarks.bounded_out_of_orderness("ts", max_delay="10s")
    batch = int(p.args.get("batch_size", 100))
    orders = p.source(sources.files(p.args["orders"], format="jsonl", batch_size=batch),
                      watermarks=events)
    payments = p.source(sources.files(p.args["payments"], format="jsonl", batch_size=batch),
                        watermarks=events)
    connected = (orders.map(maybe_crash).key_by("order_id")
                 .connect(payments.key_by("order_id")))
    kind = p.args.get("kind", "interval")
    if kind == "process":
        connected.process(pair_in_state, name="orders-payments").sink(
            sinks.files(p.args["output"], format="jsonl"))
        return
    if kind == "window":
        pairs = connected.window_join(windows.tumbling(f"{WINDOW_MS}ms"), fn=pair,
                                      name="orders-payments")
    else:
        pairs = connected.interval_join(lower=f"{LOWER_MS}ms", upper=f"{UPPER_MS}ms",
                                        fn=pair, name="orders-payments")
    pairs.sink(sinks.files(p.args["output"], format="jsonl"))
    pairs.side_output("late").sink(sinks.files(f"{p.args['output']}-late", format="jsonl"),
                                   name="late")
