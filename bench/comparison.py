"""Running a set of rows (ours and tuned baselines) alternately, and reporting them.

First each baseline's batch size is tuned (unless given), then every
repetition runs every row once, in the order given, so that ours and the
baselines see the same machine. The machine's load average is sampled before
each run and reported: absolute numbers on a shared machine move with it, so
the comparison is the ratio within one repetition, reported as the median over
repetitions.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any

from bench.common import (
    BenchmarkError,
    median,
    plot_path,
    print_table,
    pyplot,
    target_entry,
    update_summary,
    write_result,
)
from bench.rows import (
    Baseline,
    Measurement,
    Ours,
    Row,
    load_average,
    run_row,
    summarise,
    tune_baseline,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pair:
    """Ours against the fastest of some baselines, per repetition."""

    ours: str
    baselines: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ratio:
    """A pair's ratios, one per repetition, steady-state and end to end."""

    ours: str
    against_fastest_of: tuple[str, ...]
    steady: list[float]
    end_to_end: list[float]

    @property
    def steady_median(self) -> float:
        return median(self.steady)

    @property
    def end_to_end_median(self) -> float:
        return median(self.end_to_end)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RateTarget:
    """An absolute target for one of our rows: records/s with checkpoints as promised."""

    key: str
    label: str
    records_per_second: float
    checkpoint_interval_s: float


def rate_entry(target: RateTarget, *, runs: Sequence[Sequence[Measurement]],
               records: int) -> dict[str, Any]:
    """The summary entry for ``target``: the median of our row over the repetitions.

    A rate counts only if every run took a checkpoint per interval of its processing
    time: a run that checkpointed less would be measuring a job without the
    checkpoints the target is about.
    """
    ours = [m for repetition in runs for m in repetition if m.label == target.label]
    if not ours:
        raise BenchmarkError(benchmark=target.key, problem=f"no runs of {target.label!r}")
    value = median([m.steady_records_per_second for m in ours])
    checkpoints = [int(m.detail.get("checkpoints", 0)) for m in ours]
    promised = [int(float(m.detail.get("processing_seconds", 0.0))
                    // target.checkpoint_interval_s) for m in ours]
    short = [f"{c} < {p}" for c, p in zip(checkpoints, promised, strict=True) if c < p]
    note = (f"{records:,} records; checkpoints per run {', '.join(map(str, checkpoints))} "
            f"every {target.checkpoint_interval_s:g} s")
    if short:
        note += f"; fewer checkpoints than intervals of processing ({'; '.join(short)})"
    return target_entry(value=value, target=target.records_per_second, unit="records/s",
                        met=value >= target.records_per_second and not short, note=note)


def _tune(rows: Sequence[Row], ns: argparse.Namespace, name: str) -> tuple[dict[str, int],
                                                                           dict[str, Any]]:
    sizes: dict[str, int] = {}
    searches: dict[str, Any] = {}
    for row in rows:
        if not isinstance(row, Baseline):
            continue
        if ns.rows_per_batch:
            sizes[row.label] = ns.rows_per_batch
            continue
        print(f"[{name}] tuning rowsPerBatch of {row.label}", flush=True)
        tuning = tune_baseline(row, records=row.records_of(ns.records), keys=ns.keys,
                               timeout=ns.timeout)
        sizes[row.label] = tuning.chosen
        searches[row.label] = [dataclasses.asdict(p) for p in tuning.points]
        tried = ", ".join(f"{p.rows_per_batch:,}: {p.batch_ms_median:,.0f} ms "
                          f"{p.records_per_second:,.0f}/s" for p in tuning.points)
        print(f"[{name}]   {row.label}: rowsPerBatch {tuning.chosen:,} ({tried})", flush=True)
    return sizes, searches


def _ratios(pair: Pair, runs: list[list[Measurement]], field: str, *,
            same_records: bool = False) -> list[float]:
    """Ours over the fastest baseline, per repetition; with ``same_records``, only where
    every side ran the same records (an end-to-end time of fewer records compares
    nothing)."""
    out = []
    for repetition in runs:
        by_label = {m.label: m for m in repetition}
        sides = [by_label[pair.ours], *(by_label[b] for b in pair.baselines)]
        if same_records and len({m.records for m in sides}) > 1:
            continue
        best = max(getattr(by_label[b], field) for b in pair.baselines)
        out.append(getattr(by_label[pair.ours], field) / best)
    return out


def select_rows(rows: Sequence[Row], pairs: Sequence[Pair], *,
                only: Sequence[str]) -> tuple[list[Row], list[Pair]]:
    """The rows labelled in ``only`` (all when it is empty), and the pairs that still
    compare two of them (each against the baselines left). An unknown label raises
    :class:`BenchmarkError` naming the known ones."""
    if not only:
        return list(rows), list(pairs)
    known = [r.label for r in rows]
    unknown = [label for label in only if label not in known]
    if unknown:
        raise BenchmarkError(benchmark="rows", problem=f"no row {unknown[0]!r}; the rows are "
                                                       f"{', '.join(map(repr, known))}")
    kept = [r for r in rows if r.label in only]
    compared = [Pair(ours=p.ours, baselines=tuple(b for b in p.baselines if b in only))
                for p in pairs if p.ours in only]
    return kept, [p for p in compared if p.baselines]


def run_comparison(*, name: str, title: str, rows: Sequence[Row], pairs: Sequence[Pair],
                   ns: argparse.Namespace, target_ratio: float, summary_key: str,
                   summary_unit: str, left_out: dict[str, str] | None = None,
                   rate_target: RateTarget | None = None) -> dict[str, Any]:
    sizes, searches = _tune(rows, ns, name)
    runs: list[list[Measurement]] = []
    loads: list[float] = []
    for i in range(ns.repeat):
        repetition = []
        for row in rows:
            load = load_average()[0]
            loads.append(load)
            print(f"[{name}] repetition {i + 1}/{ns.repeat}: {row.label} "
                  f"(load average {load:.1f})", flush=True)
            m = run_row(row, records=ns.records, keys=ns.keys, rows_per_batch=sizes,
                        timeout=ns.timeout)
            print(f"[{name}]   steady {m.steady_records_per_second:,.0f} records/s; "
                  f"{m.seconds_to_last_record:.1f} s to the last record "
                  f"({m.end_to_end_records_per_second:,.0f} records/s end to end)", flush=True)
            repetition.append(m)
        runs.append(repetition)
    flat = [m for repetition in runs for m in repetition]
    medians = summarise(list(rows), flat)
    print_table(f"{name}: {title}, {ns.records:,} records, {ns.keys:,} keys, "
                f"medians of {ns.repeat} (load average {min(loads):.1f}-{max(loads):.1f})",
                ["row", "steady rec/s", "s to last record", "end-to-end rec/s", "wall s",
                 "rowsPerBatch"],
                [[r["label"], r["steady_records_per_second"], r["seconds_to_last_record"],
                  r["end_to_end_records_per_second"], r["wall_seconds"],
                  sizes.get(r["label"])] for r in medians])
    ratios = [Ratio(ours=pair.ours, against_fastest_of=pair.baselines,
                    steady=_ratios(pair, runs, "steady_records_per_second"),
                    end_to_end=_ratios(pair, runs, "end_to_end_records_per_second",
                                       same_records=True))
              for pair in pairs]
    print_table(f"{name}: ratios within each repetition (ours / fastest baseline)",
                ["ours", "against", "steady (per repetition)", "median", "end to end", "median"],
                [[r.ours, " | ".join(r.against_fastest_of),
                  " ".join(f"{x:.2f}" for x in r.steady), r.steady_median,
                  " ".join(f"{x:.2f}" for x in r.end_to_end), r.end_to_end_median]
                 for r in ratios])
    if not ratios:
        raise BenchmarkError(benchmark=name, problem="no comparison pairs")
    headline = ratios[0]
    met = headline.steady_median >= target_ratio
    _plot(name=name, rows=rows, medians=medians)
    data = {
        "scale": {"records": ns.records, "keys": ns.keys, "parallelism": 2,
                  "repeat": ns.repeat, "checkpoint_interval_s": 1.0, "trigger_s": 1.0},
        "load_average": {"min": min(loads), "max": max(loads), "samples": loads},
        "rows": [{"label": r.label, "kind": "ours" if isinstance(r, Ours) else "baseline",
                  "description": r.description,
                  "rows_per_batch": sizes.get(r.label),
                  "tuning": searches.get(r.label)} for r in rows],
        "left_out": left_out or {},
        "runs": [[dataclasses.asdict(m) for m in repetition] for repetition in runs],
        "medians": medians,
        "ratios": [{**dataclasses.asdict(r), "steady_median": r.steady_median,
                    "end_to_end_median": r.end_to_end_median} for r in ratios],
        "target": {"ratio": target_ratio, "met": met},
    }
    write_result(name, data)
    rate = ({rate_target.key: rate_entry(rate_target, runs=runs, records=ns.records)}
            if rate_target else {})
    update_summary({
        **rate,
        summary_key: target_entry(
            value=headline.steady_median, target=target_ratio, unit=summary_unit, met=met,
            baseline=median(max(m.steady_records_per_second for m in rep
                                if m.label in headline.against_fastest_of) for rep in runs),
            note=f"end to end {headline.end_to_end_median:.2f}x; {ns.records:,} records, "
                 f"{ns.keys:,} keys; load average {min(loads):.1f}-{max(loads):.1f}"),
    })
    return data


def _plot(*, name: str, rows: Sequence[Row], medians: list[dict[str, Any]]) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    labels = [r["label"] for r in medians]
    colors = ["tab:blue" if isinstance(r, Ours) else "tab:grey" for r in rows]
    left.barh(labels, [r["steady_records_per_second"] for r in medians], color=colors)
    left.set_xlabel("steady-state records / s (median)")
    left.invert_yaxis()
    right.barh(labels, [r["seconds_to_last_record"] for r in medians], color=colors)
    right.set_xlabel("seconds from launch to last record (median)")
    right.invert_yaxis()
    right.set_yticklabels([])
    fig.suptitle(f"{name} (parallelism 2, same run)")
    fig.tight_layout()
    fig.savefig(plot_path(name))
    plt.close(fig)
