"""``python -m bench all`` or one benchmark: ``throughput``, ``python-state``, ``overhead``,
``barriers``, ``state-size``, ``recovery``, ``sync-part``, ``recovery-operator``,
``rocksdb-state``, ``ss-rocksdb-state``, ``operator``, ``channel-mac``, ``kafka``,
``windows``, ``timers``, ``joins``, ``realistic``.

Each benchmark prints a table, writes ``bench/results/<name>.json`` and a PNG
plot, and rewrites its own entries of ``bench/results/summary.json``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from types import ModuleType

from bench import run_record
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
    "joins": "bench.joins",
    "realistic": "bench.realistic",
}
ALL: list[tuple[str, ...]] = [
    ("throughput",), ("python-state", "--records", "20000000"), ("overhead",), ("barriers",),
    ("state-size",), ("recovery",), ("recovery", "--kill", "subtask"),
    ("recovery", "--standby"), ("sync-part",), ("recovery-operator",),
    ("rocksdb-state", "--size-gb", "5"), ("ss-rocksdb-state", "--state-gb", "5"),
    ("operator",),
    ("realistic", "--records", "40000000"),
    ("realistic", "--dataset", "orders", "--records", "40000000"),
    ("windows",), ("kafka", "--records", "10000000"), ("joins", "--records", "2000000")]
"""Every benchmark with a target, with the options of each variant that has its own
target (a driver kill, a subtask kill, a standby's takeover, the second realistic
dataset) and the issue's scale where a default is smaller: inputs large enough that
Structured Streaming's fastest batch size, searched up to a quarter of the input, still
leaves several batches (40M realistic records, a 10M-record topic, 20M records for
Python state, whose baselines pay seconds per batch whatever its size), and 5 GiB of
RocksDB state, ours and Structured Streaming's alike (its run takes 45 GB of scratch
space at its peak). The comparisons with Structured Streaming's searches, the longest,
come last, so that a run in two parts (``--from``/``--to``) splits them from the rest
(``joins`` last of all: it came after the others' run of record). ``timers`` is not
here: its Structured Streaming side runs about a thousand records a second
(bench/README.md)."""
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
    every.add_argument("--from", dest="first", type=int, default=1, metavar="STEP",
                       help="start at this step (numbered by --list; default 1)")
    every.add_argument("--to", dest="last", type=int, default=None, metavar="STEP",
                       help="stop after this step (default: the last)")
    every.add_argument("--join", action="store_true",
                       help="add this part to the run on record although the code changed "
                            "since its first part (the changed files are listed in all.json)")
    every.add_argument("--list", action="store_true",
                       help="print the numbered steps and exit")
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


def selected_steps(*, repeat: int | None, first: int,
                   last: int | None) -> list[tuple[int, list[str]]]:
    """The steps from ``first`` to ``last`` (1-based, both included), each with its number;
    a range outside the list is a user mistake, said in words."""
    steps = all_steps(repeat=repeat)
    last = len(steps) if last is None else last
    if not 1 <= first <= last <= len(steps):
        raise BenchmarkError(benchmark="all", problem=(
            f"--from {first} --to {last} is not a range of steps 1-{len(steps)} "
            f"(see python -m bench all --list)"))
    return [(number, steps[number - 1]) for number in range(first, last + 1)]


def _run_all(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The selected steps one after another; a failing step is reported and the next one
    runs. Each step's time and outcome go to ``all.json`` (:mod:`bench.run_record`)."""
    try:
        steps = selected_steps(repeat=ns.repeat, first=ns.first, last=ns.last)
    except BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if ns.list:
        for number, args in steps:
            print(f"{number:>3}  {' '.join(args)}")
        return 0
    record = run_record.RunRecord.begin(argv=sys.argv[1:], join=ns.join)
    failures = []
    for number, args in steps:
        step = " ".join(args)
        started = time.monotonic()
        print(f"==> [{number}/{len(ALL)}] {step}", flush=True)
        error = None
        try:
            _module(args[0]).run(parser.parse_args(args))
        except Exception as exc:
            failures.append(step)
            error = str(exc)
            print(f"==> {step} FAILED: {exc}", flush=True)
        seconds = time.monotonic() - started
        print(f"==> {step} took {seconds:.0f}s", flush=True)
        record.add_step(number=number, args=args, seconds=seconds, error=error)
    record.finish()
    if failures:
        print(f"failed: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.benchmark != "all":
        return _run_one(ns)
    return _run_all(ns, parser)


if __name__ == "__main__":
    sys.exit(main())
