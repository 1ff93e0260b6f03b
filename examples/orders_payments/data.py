"""Write the example's input: ``orders/`` and ``payments/``, JSON lines in event-time
order (4 files each). Each order has 0 to 2 payments from a minute before it to 15
minutes after; the job pairs those within 10 minutes after their order.

    python examples/orders_payments/data.py [--out DIR] [--orders N]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def write(out: Path, *, orders: int = 2_000, seed: int = 5) -> None:
    rng = random.Random(seed)
    order_rows, payment_rows = [], []
    for order in range(orders):
        ts = START_MS + order * 250
        order_rows.append({"order_id": f"o-{order:05d}", "ts": ts,
                           "customer": f"c-{rng.randrange(300):03d}",
                           "total": round(rng.uniform(5, 500), 2)})
        for _ in range(rng.choice((0, 1, 1, 1, 2))):
            payment_rows.append({"order_id": f"o-{order:05d}",
                                 "ts": ts + rng.randrange(-60_000, 15 * 60_000),
                                 "amount": round(rng.uniform(5, 500), 2)})
    payment_rows.sort(key=lambda row: row["ts"])
    for name, rows in (("orders", order_rows), ("payments", payment_rows)):
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.jsonl"):
            old.unlink()
        size = -(-len(rows) // 4)
        for part in range(4):
            chunk = rows[part * size:(part + 1) * size]
            (folder / f"{name}-{part:03d}.jsonl").write_text(
                "".join(json.dumps(row) + "\n" for row in chunk))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(".cjob/input/orders-payments"))
    parser.add_argument("--orders", type=int, default=2_000)
    args = parser.parse_args()
    write(args.out, orders=args.orders)
    print(f"wrote {args.out}/orders and {args.out}/payments")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
