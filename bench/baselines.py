"""The two Structured Streaming baselines of a files benchmark, and ours' ratios to them.

The files benchmarks (``realistic``, ``windows``, ``timers``, ``joins``) hold ours against
Structured Streaming twice: at its fastest batch size (the headline: a user who picks it
for throughput runs batches that large) and at the fastest whose batches fit our 1 s
checkpoint interval (equal freshness, a second row). Each size is a
``maxFilesPerTrigger``, searched in a process of its own or given by ``--max-files``
for both; when both searches choose one size, one run serves both rows. What the
``windows``, ``timers`` and ``joins`` comparisons share besides is here too: their
Structured Streaming side's steps in a process of their own, medians over repetitions
(``realistic`` too) and the plot of the two rates.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from bench.common import BenchmarkError, median, plot_path, pyplot, run_ss_step
from bench.ss_results import TUNED_PREFIX, ResultFormatError, Tuning, parse_tuning


class Scale(Protocol):
    """What a Structured Streaming step reads of a files benchmark's scale
    (:class:`bench.windows.Scale`, named here without importing it: it imports this)."""

    @property
    def spec(self) -> Any: ...

    @property
    def watermark_delay_s(self) -> float: ...

    @property
    def parallelism(self) -> int: ...

    @property
    def timeout(self) -> float: ...


BASELINES = ("throughput", "interval")
"""Structured Streaming at its fastest batch size, and at the fastest that fits 1 s."""
BASELINE_KEYS = {"throughput": "structured_streaming",
                 "interval": "structured_streaming_at_interval"}
"""Where a repetition keeps each baseline's run."""
SUFFIXES = {"throughput": "", "interval": "_at_interval"}
"""The suffix of each baseline's ratios in a repetition."""


def search_sizes(tune: Callable[..., Tuning], *, given: int | None, file_records: int,
                 log: Callable[[str], None]) -> tuple[dict[str, Tuning | None], dict[str, int]]:
    """Each baseline's search result and ``maxFilesPerTrigger``: ``tune(search=...)`` for
    each search, or ``given`` (``--max-files``) for both without a search."""
    tunings: dict[str, Tuning | None] = dict.fromkeys(BASELINES)
    if given is not None:
        return tunings, dict.fromkeys(BASELINES, given)
    max_files: dict[str, int] = {}
    for search in BASELINES:
        log(f"Structured Streaming: the {search} search over maxFilesPerTrigger")
        tuning = tune(search=search)
        tunings[search] = tuning
        max_files[search] = max(1, tuning.chosen // file_records)
    return tunings, max_files


def measure(run: Callable[..., dict[str, Any]], *, max_files: dict[str, int],
            log: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Each baseline's run of one repetition, by its key (:data:`BASELINE_KEYS`);
    ``run(max_files=...)`` measures one ``maxFilesPerTrigger``, once per size."""
    by_size: dict[int, dict[str, Any]] = {}
    runs: dict[str, dict[str, Any]] = {}
    for search in BASELINES:
        size = max_files[search]
        if size not in by_size:
            log(f"Structured Streaming, {search} baseline (maxFilesPerTrigger {size})")
            by_size[size] = run(max_files=size)
            log(f"Structured Streaming: {by_size[size]['steady_records_per_second']:,.0f} "
                f"records/s steady, output checked")
        runs[BASELINE_KEYS[search]] = by_size[size]
    return runs


def add_ratios(entry: dict[str, Any], *, ours: dict[str, Any]) -> None:
    """Ours' steady and whole-input ratios to each baseline of ``entry``."""
    for search in BASELINES:
        ss = entry[BASELINE_KEYS[search]]
        suffix = SUFFIXES[search]
        entry[f"ratio_steady{suffix}"] = (ours["steady_records_per_second"]
                                          / ss["steady_records_per_second"])
        entry[f"ratio_whole{suffix}"] = (ours["whole_records_per_second"]
                                         / ss["whole_records_per_second"])


def run_median(runs: list[dict[str, Any]], side: str, key: str) -> float:
    """The median over repetitions of ``side``'s ``key`` (``ours``, a baseline's key)."""
    return median(run[side][key] for run in runs)


def ss_step(module: str, mode: str, *, benchmark: str, ss_input: Path, work: Path,
            scale: Scale, log: Path, prefix: str, extra: list[str]) -> str:
    """Run one step (``tune`` or ``run``) of a files benchmark's Structured Streaming
    side, ``python -m <module>``, in its own process (its own JVM); its result line."""
    command = [sys.executable, "-m", module, mode, "--input", str(ss_input),
               "--records", str(scale.spec.records),
               "--file-records", str(scale.spec.file_records),
               "--delay-seconds", f"{scale.watermark_delay_s:g}",
               "--parallelism", str(scale.parallelism), "--work", str(work),
               "--timeout", str(scale.timeout), *extra]
    return run_ss_step(command, benchmark=benchmark, what=mode, log=log, cwd=work,
                       timeout=scale.timeout * 2, prefix=prefix)


def ss_tune(module: str, *, benchmark: str, ss_input: Path, work: Path, scale: Scale,
            search: str, start: int) -> Tuning:
    """One search (``throughput`` or ``interval``) of ``module``'s batch size, from
    ``start`` records."""
    line = ss_step(module, "tune", benchmark=benchmark, ss_input=ss_input, work=work,
                   scale=scale, log=work / f"ss-tune-{search}.log", prefix=TUNED_PREFIX,
                   extra=["--start", str(start), "--search", search])
    try:
        return parse_tuning(line)
    except ResultFormatError as exc:
        raise BenchmarkError(benchmark=benchmark, problem=str(exc)) from None


def rate_bars(runs: list[dict[str, Any]], *, name: str, title: str, ours: str,
              baseline: str) -> None:
    """The plot of a files comparison: ours' and the baseline's steady and whole-input
    records/s (medians), labelled ``ours`` and ``baseline``."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    labels = ["steady", "whole input"]
    width = 0.38
    xs = range(len(labels))
    for offset, side, label in ((-width / 2, "ours", ours),
                                (width / 2, BASELINE_KEYS["throughput"], baseline)):
        ax.bar([x + offset for x in xs],
               [run_median(runs, side, "steady_records_per_second"),
                run_median(runs, side, "whole_records_per_second")], width, label=label)
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("records/s (medians)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot_path(name))
    plt.close(fig)
