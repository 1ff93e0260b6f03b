"""Verify the clicks-per-minute output: every (user, minute) window once, with the count
and total pandas computes from the input.

The job emits a window's row once, when the watermark passes the window's end; with
no record later than the watermark allows, the committed rows must be exactly the
tumbling windows of the input, each once. A lost record leaves a count short, a
replayed one a count too high or a row twice, a lost window no row. Exit code 0 and
the verdict ``output exactly-once`` when it holds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from clicks import read  # noqa: E402


def expected_windows(frame: pd.DataFrame, *, size_ms: int) -> dict[tuple[str, int], tuple[int, int]]:
    """``(user, window_start) -> (n, total)`` of the tumbling windows of ``size_ms``."""
    starts = frame["ts"] - frame["ts"] % size_ms
    grouped = frame.assign(window_start=starts).groupby(["user", "window_start"])["amount"]
    counts, totals = grouped.count(), grouped.sum()
    return {(str(user), int(start)): (int(counts[(user, start)]), int(totals[(user, start)]))
            for user, start in counts.index}


def verify(records: list[dict[str, Any]], frame: pd.DataFrame, *, size_ms: int) -> list[str]:
    """Empty when every window's row was committed exactly once, with the right values."""
    expected = expected_windows(frame, size_ms=size_ms)
    seen: dict[tuple[str, int], int] = {}
    found: list[str] = []
    for record in records:
        key = (str(record["user"]), int(record["window_start"]))
        seen[key] = seen.get(key, 0) + 1
        if int(record["window_end"]) != key[1] + size_ms:
            found.append(f"{key}: window_end {record['window_end']}")
        want = expected.get(key)
        if want is None:
            found.append(f"{key}: a window the input does not have")
        elif (int(record["n"]), round(float(record["total"]))) != want:
            found.append(f"{key}: n={record['n']} total={record['total']}, expected {want}")
    found += [f"{key}: emitted {n} times" for key, n in seen.items() if n > 1]
    found += [f"{key}: never emitted" for key in expected if key not in seen]
    return found


def read_output(directory: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for path in sorted(directory.iterdir()):
        if path.name.startswith((".", "_")) or not path.is_file():
            continue
        with path.open() as handle:
            records.extend(json.loads(line) for line in handle if line.strip())
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", type=Path, default=HERE / "data")
    parser.add_argument("--output", type=Path, default=Path(".cjob/output/clicks-per-minute"))
    parser.add_argument("--size-ms", type=int, default=60_000)
    args = parser.parse_args()
    if not args.output.is_dir():
        print(f"no output at {args.output}: run the job first", file=sys.stderr)
        return 1
    problems = verify(read_output(args.output), read(args.input), size_ms=args.size_ms)
    for problem in problems[:20]:
        print(problem)
    if problems:
        print(f"{len(problems)} problems")
        return 1
    print("output exactly-once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
