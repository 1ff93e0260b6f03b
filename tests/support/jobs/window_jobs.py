"""An event-time window job for the runtime tests: clicks per user and window, read from
the JSON lines files of the clicks-per-minute example's format
(``examples/clicks_per_minute/clicks.py`` writes them, its ``verify.py`` checks the
output), with knobs the example does not need: a pause per batch, and a subtask that
kills itself once at a given click.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from crashing_jobs import _crash_once

from cjob_checkpoint.store.file import list_checkpoints
from job_runtime import Pipeline, sinks, sources, watermarks, windows


def slow_or_crash(p: Pipeline) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """A ``map_batches`` function: sleeps ``pause`` seconds per batch, and kills its
    subtask once when the batch holds click ``crash_at``.

    With ``crash_after_checkpoint_in`` (a file store's directory), the kill waits for
    the first batch from click ``crash_at`` on that comes after a checkpoint completed:
    a test that asserts a restore from a checkpoint then holds however fast the job
    reaches the click. (Waiting inside the batch would hold the barrier the checkpoint
    needs.)"""
    pause = float(p.args.get("pause", 0.0))
    crash_at = int(p.args.get("crash_at", -1))
    store = p.args.get("crash_after_checkpoint_in")
    maybe_crash = _crash_once(p)

    def due(batch: pa.RecordBatch) -> bool:
        seqs = batch.column("seq").to_pylist()
        if store is None:
            return crash_at in seqs
        return max(seqs, default=-1) >= crash_at and bool(
            list_checkpoints(store, skip_corrupt=True))

    def slowly(batch: pa.RecordBatch) -> pa.RecordBatch:
        if crash_at >= 0 and due(batch):
            maybe_crash({"seq": crash_at})
        if pause:
            time.sleep(pause)
        return batch

    return slowly


def per_window(p: Pipeline) -> None:
    """Clicks per user in tumbling windows of ``size`` (default 10s)."""
    strategy = watermarks.bounded_out_of_orderness(
        "ts", max_delay=p.args.get("max_delay", "5s"), idle_after=p.args.get("idle_after"))
    (p.source(sources.files(p.args["input"], format="jsonl",
                            batch_size=int(p.args.get("batch_size", 500))),
              watermarks=strategy)
      .map_batches(slow_or_crash(p))
      .key_by("user")
      .window(windows.tumbling(p.args.get("size", "10s")),
              allowed_lateness=p.args.get("allowed_lateness", 0))
      .aggregate(n="count", total=("sum", "amount"))
      .sink(sinks.files(p.args["output"], format="jsonl")))


def per_window_by_process(p: Pipeline) -> None:
    """The rows of :func:`per_window` computed by ``window(...).process(fn)`` from each
    window's records."""

    def count(user: str, window: windows.Window, clicks: list[dict[str, Any]]
              ) -> list[dict[str, Any]]:
        return [{"user": user, "window_start": window.start, "window_end": window.end,
                 "n": len(clicks), "total": sum(c["amount"] for c in clicks)}]

    strategy = watermarks.bounded_out_of_orderness("ts", max_delay="5s")
    (p.source(sources.files(p.args["input"], format="jsonl",
                            batch_size=int(p.args.get("batch_size", 500))),
              watermarks=strategy)
      .map_batches(slow_or_crash(p))
      .key_by("user")
      .window(windows.tumbling(p.args.get("size", "10s")))
      .process(count)
      .sink(sinks.files(p.args["output"], format="jsonl")))
