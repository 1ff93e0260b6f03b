"""What every benchmark shares: running our driver, medians, tables, plots, results files.

Timings on a small, shared machine are noisy, so every benchmark measures its
baseline in the same run, alternating baseline and candidate repetitions, and
reports medians and ratios rather than absolute numbers alone.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from job_runtime.execution.driver.scratch import remove_orphans

REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(os.environ.get("BENCH_RESULTS", str(REPO / "bench" / "results")))
WORK = Path(os.environ.get("BENCH_WORK", str(REPO / "bench" / "work")))


class BenchmarkError(Exception):
    """A benchmark run did not produce a measurement."""

    def __init__(self, *, benchmark: str, problem: str) -> None:
        super().__init__(f"{benchmark}: {problem}")
        self.benchmark = benchmark
        self.problem = problem


def require_checkpoints(*, benchmark: str, run: str, completed: int, expected: float,
                        advice: str) -> None:
    """Refuse a measurement whose runs held far fewer checkpoints than expected.

    A run that ends early, because the job outgrew the scale it was given, leaves a
    handful of checkpoints; a rate or a percentile over a handful says nothing, and
    no number is better than that one.
    """
    if completed < max(2.0, expected / 4):
        raise BenchmarkError(
            benchmark=benchmark,
            problem=f"{run}: {completed} periodic checkpoints where about {expected:.0f} "
                    f"were expected; the run is too short to measure ({advice})")


def today() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def median(values: Iterable[float]) -> float:
    data = [v for v in values if v is not None]
    return float(statistics.median(data)) if data else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1); what p50/p99 mean in the tables."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 1))))
    return float(ordered[rank - 1])


def python_env() -> dict[str, str]:
    """The environment for child processes: the repo importable, output unbuffered."""
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / "operator")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


RUN_PREFIX = "run-"
"""Scratch folders are ``run-<pid>-<benchmark>-<random>``: the pid tells a killed run's."""


def fresh_dir(name: str) -> Path:
    """An empty working directory under ``bench/work`` for one run.

    A run that is killed (Ctrl-C twice, a stopped machine, ENOSPC in a JVM) never
    removes its folder, and the large-state benchmarks leave gigabytes: the next run
    of any benchmark removes the folders whose process is gone before it makes its own.
    """
    WORK.mkdir(parents=True, exist_ok=True)
    remove_orphans(parent=WORK, prefix=RUN_PREFIX)
    return Path(tempfile.mkdtemp(prefix=f"{RUN_PREFIX}{os.getpid()}-{name}-", dir=WORK))


def free_bytes(directory: Path) -> int:
    """Free bytes on the file system that holds ``directory``."""
    return shutil.disk_usage(directory).free


def require_free_space(*, benchmark: str, directory: Path, needed: int, what: str) -> None:
    """Refuse a run whose scratch data cannot fit, before it spends minutes filling it.

    Running out of space half-way fails deep inside RocksDB or a JVM, after the fill,
    with an error that names neither the benchmark nor the room it needed.
    """
    free = free_bytes(directory)
    if free < needed:
        raise BenchmarkError(
            benchmark=benchmark,
            problem=f"needs about {needed / 2**30:.1f} GiB free under {directory} for "
                    f"{what}, and {free / 2**30:.1f} GiB free there; `make clean` removes "
                    f"leftover scratch data, BENCH_WORK moves it to a larger disk")


def remove_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DriverRun:
    """The outcome of one run of our driver: its final status file and wall time."""

    status: dict[str, Any]
    wall_seconds: float
    launched_at: float
    """Wall-clock (epoch seconds) time the driver process was launched."""
    returncode: int
    log: str

    @property
    def timeline(self) -> dict[str, float]:
        timeline: dict[str, float] = self.status.get("timeline", {})
        return timeline

    @property
    def records(self) -> int:
        return int(self.status.get("recordsIn", 0))

    def processing_seconds(self) -> float:
        """From the first subtask being ready (its source starts reading) to the last
        record the keyed stage processed.

        Not from the keyed stage's first record: with a combiner before the
        exchange that record arrives only after the first flush, and a window
        starting there would leave out the source's first moments of work.
        """
        t = self.timeline
        start = t.get("firstReadyAt") or t["firstRecordAt"]
        return float(t["lastRecordAt"]) - float(start)

    def records_per_second(self) -> float:
        return self.records / self.processing_seconds()

    def seconds_to_last_record(self) -> float:
        """End to end: from launching the driver (Spark's start included) to the last record."""
        return float(self.timeline["lastRecordAt"]) - self.launched_at

    @property
    def history(self) -> list[dict[str, Any]]:
        history: list[dict[str, Any]] = self.status.get("checkpointHistory", [])
        return history


def run_driver(*, name: str, entrypoint: str, args: dict[str, Any], parallelism: int = 2,
               checkpoint_interval: float = 1.0, storage: str | None = None,
               extra: Sequence[str] = (), timeout: float = 900.0) -> DriverRun:
    """Run ``python -m job_runtime run`` to its end and return its final status."""
    work = fresh_dir(name)
    status_file = work / "status.json"
    log_file = work / "driver.log"
    command = [
        sys.executable, "-m", "job_runtime", "run",
        "--job-name", name, "--job-uid", uuid.uuid4().hex[:8],
        "--entrypoint", entrypoint, "--python-path", str(REPO),
        "--args-json", json.dumps(args), "--parallelism", str(parallelism),
        "--master", f"local[{parallelism}]",
        "--checkpoint-storage", storage or (work / "checkpoints").as_uri(),
        "--checkpoint-interval", str(checkpoint_interval),
        "--store", f"file:{work / 'store'}", "--status-file", str(status_file),
        "--spark-conf", "spark.driver.memory=2g",
        *extra,
    ]
    launched_at = time.time()
    started = time.monotonic()
    with open(log_file, "wb") as log:
        try:
            proc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                                  env=python_env(), timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            remove_dir(work)
            raise BenchmarkError(benchmark=name, problem=f"the driver did not finish within "
                                 f"{timeout:.0f} s (stopped); use a smaller scale or a "
                                 f"longer --timeout") from None
    wall = time.monotonic() - started
    text = log_file.read_text(errors="replace")
    try:
        status = json.loads(status_file.read_text())
    except (OSError, ValueError):
        status = {}
    remove_dir(work)
    if proc.returncode != 0 or status.get("state") != "finished":
        tail = "\n".join(text.splitlines()[-15:])
        raise BenchmarkError(benchmark=name,
                             problem=f"driver exited {proc.returncode}; log tail:\n{tail}")
    return DriverRun(status=status, wall_seconds=wall, launched_at=launched_at,
                     returncode=proc.returncode, log=text)


def run_ss_step(command: list[str], *, benchmark: str, what: str, log: Path, cwd: Path,
                timeout: float, prefix: str) -> str:
    """Run one step of a Structured Streaming side in its own process (its own JVM),
    stderr to ``log``; the last line of its output that starts with ``prefix``. A step
    that hangs, fails or prints no result ends the benchmark with the log's tail."""
    with open(log, "wb") as err:
        try:
            proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=err,
                                  env=python_env(), cwd=cwd, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise BenchmarkError(benchmark=benchmark, problem=f"Structured Streaming ({what}) "
                                                              f"did not finish") from None
    lines = [line for line in proc.stdout.decode(errors="replace").splitlines()
             if line.startswith(prefix)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise BenchmarkError(benchmark=benchmark, problem=f"Structured Streaming ({what}) "
                                                          f"exited {proc.returncode}; log "
                                                          f"tail:\n{tail}")
    return lines[-1]


# ---------------------------------------------------------------------- output


def print_table(title: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Print a plain fixed-width table and return it as text."""
    body = [[_cell(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h)
              for i, h in enumerate(header)]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value != value:
            return "n/a"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3g}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    return str(value)


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    body = {"benchmark": name, "measured_at": today(), **data}
    path.write_text(json.dumps(body, indent=2, sort_keys=False, default=_json_default) + "\n")
    return path


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    return str(value)


def update_summary(entries: dict[str, dict[str, Any]]) -> None:
    """Rewrite only this benchmark's targets in ``summary.json``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "summary.json"
    try:
        summary: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        summary = {}
    stamp = today()
    for key, entry in entries.items():
        summary[key] = {**entry, "measured_at": stamp}
    path.write_text(json.dumps(dict(sorted(summary.items())), indent=2,
                               default=_json_default) + "\n")


def target_entry(*, value: float | None, target: float | None, unit: str, met: bool | None,
                 baseline: Any = None, note: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"value": _rounded(value), "target": target, "unit": unit,
                             "met": met, "baseline": _rounded(baseline)}
    if note:
        entry["note"] = note
    return entry


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        if value != value:
            return None
        return round(value, 4)
    return value


def plot_path(name: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    return RESULTS / f"{name}.png"


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def plot_phases(*, name: str, phases: dict[str, float], order: Sequence[str],
                baseline: float, target: float, title: str) -> None:
    """A recovery as one bar of its phases, stacked in ``order``, over the cold-start bar."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    left = 0.0
    colors = plt.get_cmap("tab10").colors
    for phase, color in zip(order, colors, strict=False):
        width = max(0.0, phases[phase])
        ax.barh(["recovery"], [width], left=left, label=phase, color=color)
        left += width
    ax.barh(["cold start"], [baseline], color="lightgrey", label="cold start (baseline)")
    ax.axvline(target, color="red", linestyle="--", label="target")
    ax.set_xlabel("seconds (medians)")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    fig.tight_layout()
    fig.savefig(plot_path(name))
    plt.close(fig)
