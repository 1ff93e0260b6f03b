"""``python -m bench all`` or one benchmark: ``throughput``, ``python-state``, ``overhead``,
``barriers``, ``state-size``, ``recovery``, ``sync-part``, ``recovery-operator``,
``rocksdb-state``, ``ss-rocksdb-state``, ``operator``, ``channel-mac``, ``kafka``,
``windows``, ``timers``, ``realistic``.

Each benchmark prints a table, writes ``bench/results/<name>.json`` and a PNG
plot, and rewrites its own entries of ``bench/results/summary.json``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from types import ModuleType

from bench.common import BenchmarkError

BENCHMARKS = {
    "throughput": "bench.throughput",
    "python-state": "bench.python_state",
    "overhead": "bench.overhead",
    "barriers": "bench.barriers",
    "state-size": "bench.state_size",
    "recovery": "bench.recovery",
    "operator": "bench.operator_bench",
    "recovery-operator": "bench.operator_recovery",
    "channel-mac": "bench.channel_mac",
    "sync-part": "bench.sync_part",
    "ss-rocksdb-state": "bench.ss_rocksdb_state",
    "rocksdb-state": "bench.rocksdb_state",
    "kafka": "bench.kafka",
    "windows": "bench.windows",
    "timers": "bench.timers",
    "realistic": "bench.realistic",
}
ALL: list[tuple[str, ...]] = [
    ("throughput",), ("python-state", "--records", "20000000"), ("overhead",), ("barriers",),
    ("state-size",), ("recovery",), ("recovery", "--kill", "subtask"),
    ("recovery", "--standby"), ("sync-part",), ("recovery-operator",),
    ("realistic", "--records", "40000000"),
    ("realistic", "--dataset", "orders", "--records", "40000000"),
    ("windows",), ("kafka", "--records", "10000000"),
    ("rocksdb-state", "--size-gb", "5"), ("ss-rocksdb-state", "--state-gb", "5"),
    ("operator",)]
"""Every benchmark with a target, with the options of each variant that has its own
target (a driver kill, a subtask kill, a standby's takeover, the second realistic
dataset) and the issue's scale where a default is smaller: inputs large enough that
Structured Streaming's fastest batch size, searched up to a quarter of the input, still
leaves several batches (40M realistic records, a 10M-record topic, 20M records for
Python state, whose baselines pay seconds per batch whatever its size), and 5 GiB of
RocksDB state, ours and Structured Streaming's alike (its run takes 45 GB of scratch
space at its peak). The long ones last. ``timers`` is not here: its Structured
Streaming side runs about a thousand records a second (bench/README.md)."""
REPEATABLE = frozenset(step[0] for step in ALL) - {"rocksdb-state", "ss-rocksdb-state", "kafka"}
"""Those that take ``--repeat``; the state benchmarks measure one database each, and the
Kafka benchmark one run over its topic."""


def all_steps(*, repeat: int | None) -> list[list[str]]:
    """The command line of each step of ``all``, ``--repeat`` added where it is taken."""
    return [[name, *options] + (["--repeat", str(repeat)]
                                if repeat and name in REPEATABLE else [])
            for name, *options in ALL]


def _module(name: str) -> ModuleType:
    return importlib.import_module(BENCHMARKS[name])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = parser.add_subparsers(dest="benchmark", required=True)
    every = sub.add_parser("all", help="every benchmark with a target, at its default scale, "
                                       "one after another")
    every.add_argument("--repeat", type=int, default=None,
                       help="repetitions for every benchmark (default: each one's own)")
    for name in BENCHMARKS:
        doc = _module(name).__doc__ or ""
        # argparse formats a help string with "%": a "1%" in a summary is text.
        summary = (doc.splitlines()[0] if doc else name).replace("%", "%%")
        one = sub.add_parser(name, help=summary, description=doc)
        _module(name).add_arguments(one)
    return parser


def _run_one(ns: argparse.Namespace) -> int:
    """One benchmark; a run that could not measure ends with its reason, not a traceback."""
    try:
        _module(ns.benchmark).run(ns)
    except BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.benchmark != "all":
        return _run_one(ns)
    failures = []
    for args in all_steps(repeat=ns.repeat):
        step = " ".join(args)
        started = time.monotonic()
        print(f"==> {step}", flush=True)
        try:
            _module(args[0]).run(parser.parse_args(args))
        except Exception as exc:
            failures.append(step)
            print(f"==> {step} FAILED: {exc}", flush=True)
        print(f"==> {step} took {time.monotonic() - started:.0f}s", flush=True)
    if failures:
        print(f"failed: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
