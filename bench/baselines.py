"""The two Structured Streaming baselines of a files benchmark, and ours' ratios to them.

The files benchmarks (``realistic``, ``windows``, ``timers``) hold ours against
Structured Streaming twice: at its fastest batch size (the headline: a user who picks it
for throughput runs batches that large) and at the fastest whose batches fit our 1 s
checkpoint interval (equal freshness, a second row). Each size is a
``maxFilesPerTrigger``, searched in a process of its own or given by ``--max-files``
for both; when both searches choose one size, one run serves both rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.ss_results import Tuning

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
