"""Verify the PostgreSQL running totals: every input counted exactly once.

The rows are the running sums the job emitted; the check is the running-sum
example's (``examples/running_sum/verify.py``): a lost row leaves a step out, a row
sent twice repeats one. Exit code 0 and ``output exactly-once`` when it holds.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType


def running_sum_verifier() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "running_sum" / "verify.py"
    spec = importlib.util.spec_from_file_location("running_sum_verify", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_rows(dsn: str, table: str) -> list[dict[str, int]]:
    import psycopg
    from psycopg import sql

    query = sql.SQL("SELECT key, value FROM {}").format(sql.Identifier(table))
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(query).fetchall()
    return [{"key": key, "value": value} for key, value in rows]


def verify(rows: list[dict[str, int]], *, count: int) -> list[str]:
    problems: list[str] = running_sum_verifier().verify(rows, count=count)
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("POSTGRES_DSN"))
    parser.add_argument("--table", default="running_totals")
    parser.add_argument("--count", type=int, default=200_000)
    ns = parser.parse_args()
    if not ns.dsn:
        print("verify: give --dsn or set POSTGRES_DSN", file=sys.stderr)
        return 2
    problems = verify(read_rows(ns.dsn, ns.table), count=ns.count)
    if problems:
        for problem in problems[:20]:
            print(f"verify: {problem}")
        print("verdict: output NOT exactly-once")
        return 1
    print(f"verdict: output exactly-once ({ns.count} inputs, every running sum consistent)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
