"""The example's input: clicks whose event times come out of order, as JSON lines.

Click ``i`` happens at ``START + i * STEP_MS`` minus up to ``JITTER_MS`` (so clicks
arrive up to that much out of order), by a user drawn from a skewed distribution,
with ``amount = i % 100``. Each file holds a consecutive range of clicks, so each
file's event times advance. ``python examples/clicks_per_minute/clicks.py`` writes
the files of ``data/`` again (the same ones: the seed is fixed).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

START = 1_767_225_600_000  # 2026-01-01T00:00:00Z in milliseconds
STEP_MS = 250
JITTER_MS = 20_000


def clicks(count: int, *, users: int = 20, seed: int = 3, step_ms: int = STEP_MS,
           jitter_ms: int = JITTER_MS) -> pd.DataFrame:
    """``count`` clicks, one every ``step_ms`` of event time, each up to ``jitter_ms``
    early."""
    rng = np.random.default_rng(seed)
    index = np.arange(count, dtype=np.int64)
    weights = 1.0 / np.arange(1, users + 1)
    chosen = rng.choice(users, size=count, p=weights / weights.sum())
    return pd.DataFrame({
        "seq": index,
        "user": [f"u{k}" for k in chosen],
        "ts": START + index * step_ms - rng.integers(0, jitter_ms + 1, size=count),
        "amount": index % 100,
    })


def read(directory: Path) -> pd.DataFrame:
    """Every click of the JSON lines files in ``directory``."""
    frames = [pd.read_json(path, lines=True, dtype={"ts": "int64"})
              for path in sorted(directory.glob("*.jsonl"))]
    return pd.concat(frames, ignore_index=True)


def write(directory: Path, frame: pd.DataFrame, *, files: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for number, part in enumerate(np.array_split(np.arange(len(frame)), files)):
        rows = frame.iloc[part]
        with (directory / f"clicks-{number:03d}.jsonl").open("w") as handle:
            for seq, user, ts, amount in zip(rows["seq"], rows["user"], rows["ts"],
                                             rows["amount"], strict=True):
                handle.write(json.dumps({"seq": int(seq), "user": user, "ts": int(ts),
                                         "amount": int(amount)}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "data")
    parser.add_argument("--count", type=int, default=2400)
    parser.add_argument("--files", type=int, default=2)
    args = parser.parse_args()
    write(args.out, clicks(args.count), files=args.files)


if __name__ == "__main__":
    main()
