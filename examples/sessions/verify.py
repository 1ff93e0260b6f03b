"""Verify the sessions output: every user's session once, with the bounds, count and
total pandas computes from the input.

A user's clicks, in event-time order, are one session until the next click comes
``gap`` or more after the previous one; a session ends ``gap`` after its last click.
Both jobs of ``job.py`` emit a session's row once, when the watermark passes its end,
so the committed rows must be exactly those sessions, each once: a lost click leaves
a count short or splits a session, a replayed one a count too high or a row twice.
With ``--numbered`` (the timers job), each row's ``session`` must also number the
user's sessions 1, 2, 3... in event-time order. Exit code 0 and the verdict ``output
exactly-once`` when it holds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pandas as pd

HERE = Path(__file__).resolve().parent
CLICKS = HERE.parent / "clicks_per_minute"
sys.path.insert(0, str(CLICKS))

from clicks import read  # noqa: E402
from verify import read_output  # noqa: E402

Session = tuple[int, int, int, int]
"""``(end, n, total, number)`` of a session, by ``(user, start)``."""


def expected_sessions(frame: pd.DataFrame, *, gap_ms: int) -> dict[tuple[str, int], Session]:
    ordered = frame.sort_values(["user", "ts"], kind="stable")
    new = ordered["user"].ne(ordered["user"].shift()) | ordered["ts"].diff().ge(gap_ms)
    ordered = ordered.assign(session=new.cumsum())
    grouped = ordered.groupby("session").agg(user=("user", "first"), start=("ts", "min"),
                                            last=("ts", "max"), n=("ts", "size"),
                                            total=("amount", "sum"))
    grouped["number"] = grouped.groupby("user").cumcount() + 1
    return {(str(row.user), int(row.start)): (int(row.last) + gap_ms, int(row.n),
                                              int(row.total), int(row.number))
            for row in grouped.itertuples()}


def verify(records: list[dict[str, Any]], frame: pd.DataFrame, *, gap_ms: int,
           numbered: bool = False) -> list[str]:
    """Empty when every session's row was committed exactly once, with the right values."""
    expected = expected_sessions(frame, gap_ms=gap_ms)
    seen: dict[tuple[str, int], int] = {}
    found: list[str] = []
    for record in records:
        key = (str(record["user"]), int(record["window_start"]))
        seen[key] = seen.get(key, 0) + 1
        want = expected.get(key)
        if want is None:
            found.append(f"{key}: a session the input does not have")
            continue
        got = (int(record["window_end"]), int(record["n"]), round(float(record["total"])),
               int(record["session"]) if numbered else want[3])
        if got != want:
            found.append(f"{key}: (end, n, total, number) = {got}, expected {want}")
    found += [f"{key}: emitted {n} times" for key, n in seen.items() if n > 1]
    found += [f"{key}: never emitted" for key in expected if key not in seen]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", type=Path, default=CLICKS / "data")
    parser.add_argument("--output", type=Path, default=Path(".cjob/output/sessions"))
    parser.add_argument("--gap-ms", type=int, default=30_000)
    parser.add_argument("--numbered", action="store_true",
                        help="the output of the timers job: check the session numbers too")
    args = parser.parse_args()
    if not args.output.is_dir():
        print(f"no output at {args.output}: run the job first", file=sys.stderr)
        return 1
    problems = verify(read_output(args.output), read(args.input), gap_ms=args.gap_ms,
                      numbered=args.numbered)
    for problem in problems[:20]:
        print(problem)
    if problems:
        print(f"{len(problems)} problems")
        return 1
    print("output exactly-once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
