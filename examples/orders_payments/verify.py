"""Verify the joined table: every order paired with each of its payments within 10
minutes after it, once, as a one-shot join of the inputs gives, read back from the
Delta table. Exit code 0 and the verdict ``output exactly-once`` when it holds.

    python examples/orders_payments/verify.py [--input DIR] [--output TABLE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

WITHIN_MS = 10 * 60_000


def read(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


def expected(base: Path) -> Counter[tuple[str, int, int]]:
    by_order: dict[str, list[int]] = {}
    for payment in read(base / "payments"):
        by_order.setdefault(str(payment["order_id"]), []).append(int(payment["ts"]))
    return Counter((str(o["order_id"]), int(o["ts"]), paid)
                   for o in read(base / "orders")
                   for paid in by_order.get(str(o["order_id"]), [])
                   if 0 <= paid - int(o["ts"]) <= WITHIN_MS)


def verify(base: Path, table: str) -> list[str]:
    from deltalake import DeltaTable

    rows = DeltaTable(table).to_pyarrow_table().to_pylist()
    got = Counter((str(r["order_id"]), int(r["ordered_at"]), int(r["paid_at"])) for r in rows)
    want = expected(base)
    problems = [f"{pair}: {got[pair]} rows, expected {want[pair]}"
                for pair in sorted(set(got) | set(want)) if got[pair] != want[pair]]
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=Path(".cjob/input/orders-payments"))
    parser.add_argument("--output", default=".cjob/output/paid-orders")
    args = parser.parse_args()
    problems = verify(args.input, args.output)
    for problem in problems[:20]:
        print(problem)
    if problems:
        print(f"verdict: {len(problems)} pairs wrong")
        return 1
    print(f"verdict: output exactly-once ({sum(expected(args.input).values())} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
