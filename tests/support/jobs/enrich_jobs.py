"""Clicks enriched with their product's row from a table (``p.table`` and ``enrich``),
from JSON-lines inputs, into files; the enriching subtask may die once, and
``delay_ms`` per click keeps the job running long enough for a kill to land."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pandas as pd
from crashing_jobs import first_to_claim

from job_runtime import Pipeline, sinks, sources

PRODUCTS = 200


def write_products(folder: Path, *, price_factor: float = 1.0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"sku": f"sku-{n}", "price": round((n + 1) * 0.25 * price_factor, 2),
             "category": f"cat-{n % 7}"} for n in range(PRODUCTS)]
    (folder / "products.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_inputs(base: Path, *, clicks: int, seed: int = 5) -> None:
    """``products/`` (the table) and ``clicks/`` in four files; one click in twenty
    names a product the table does not have."""
    write_products(base / "products")
    rng = random.Random(seed)
    rows = [{"click": n, "user": rng.randrange(50),
             "sku": f"sku-{rng.randrange(PRODUCTS + PRODUCTS // 20)}"} for n in range(clicks)]
    folder = base / "clicks"
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(rows) // 4)
    for part in range(4):
        (folder / f"part-{part}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows[part * size:(part + 1) * size]))


def reference(base: Path) -> list[tuple[int, str, float | None]]:
    """``(click, sku, price)`` of every click, by a pandas left merge of the inputs."""
    def read(name: str) -> pd.DataFrame:
        return pd.DataFrame([json.loads(line) for path in sorted((base / name).glob("*.jsonl"))
                             for line in path.read_text().splitlines()])

    merged = read("clicks").merge(read("products"), on="sku", how="left")
    return sorted((int(r.click), str(r.sku), None if pd.isna(r.price) else float(r.price))
                  for r in merged.itertuples())


def enriched(p: Pipeline) -> None:
    marker, crash_at = p.args.get("crash_marker"), int(p.args.get("crash_at", -1))
    delay = float(p.args.get("delay_ms", 0)) / 1000.0

    def priced(click: dict[str, Any], product: dict[str, Any] | None) -> dict[str, Any]:
        if delay:
            time.sleep(delay)
        if marker and click["click"] == crash_at and first_to_claim(marker):
            os.kill(os.getpid(), signal.SIGKILL)
        return {"click": click["click"], "sku": click["sku"],
                "price": None if product is None else product["price"]}

    batch = int(p.args.get("batch_size", 100))
    products = p.table(sources.files(p.args["products"], format="jsonl"), key="sku",
                       name="products")
    clicks = p.source(sources.files(p.args["clicks"], format="jsonl", batch_size=batch))
    clicks.enrich(products, on="sku", fn=priced, name="priced").sink(
        sinks.files(p.args["output"], format="jsonl"))
