"""Event-time windows on real Spark: clicks per user and 10 s window from Parquet files
whose event times come up to 3 s out of order, checked against the same windows
computed with pandas. Killed, restarted at another parallelism, and with unaligned
checkpoints, every window's row is committed exactly once with its exact values; the
last windows of the bounded input fire and commit; records later than the watermark
allows are dropped, never counted into a window twice.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from runtime_harness import JobHarness, load_example

example = load_example("examples/clicks_per_minute/clicks.py")
verify = load_example("examples/clicks_per_minute/verify.py")

SIZE_MS = 10_000
COUNT = 20_000  # 400 s of event time: 41 windows per user
JITTER_MS = 3_000


def clicks(count: int) -> pd.DataFrame:
    frame: pd.DataFrame = example.clicks(count, users=50, step_ms=20, jitter_ms=JITTER_MS)
    return frame


def window_problems(records: list[dict[str, Any]], frame: pd.DataFrame, *,
                    size_ms: int) -> list[str]:
    found: list[str] = verify.verify(records, frame, size_ms=size_ms)
    return found


def prepare(harness: JobHarness, frame: pd.DataFrame, *, files: int = 4) -> dict[str, object]:
    example.write(harness.base / "input", frame, files=files)
    return {"input": str(harness.base / "input"), "output": str(harness.output),
            "batch_size": 250, "pause": 0.04}


def test_out_of_order_clicks_give_every_window_once_with_the_values_pandas_computes(
        harness: JobHarness) -> None:
    frame = clicks(COUNT)
    run = harness.run(entrypoint="window_jobs:per_window", args=prepare(harness, frame))
    assert run.returncode == 0, run.explain()
    records = harness.output_records()
    assert window_problems(records, frame, size_ms=SIZE_MS) == []
    # The input's last window fired too: the bounded input ended with the end of time.
    last = int(frame["ts"].max()) // SIZE_MS * SIZE_MS
    assert any(int(r["window_start"]) == last for r in records)


def test_a_subtask_killed_with_windows_open_under_unaligned_checkpoints_loses_and_repeats_nothing(
        harness: JobHarness) -> None:
    frame = clicks(COUNT)
    marker = harness.base / "crashed"
    args = {**prepare(harness, frame), **harness.crash_after_a_checkpoint(at=9_000)}
    run = harness.run(entrypoint="window_jobs:per_window", args=args,
                      extra=["--unaligned", "--credits", "2"])
    assert run.returncode == 0, run.explain()
    assert marker.exists(), "the subtask never reached the record that kills it"
    assert run.status is not None and run.status["restoredFrom"] is not None
    assert window_problems(harness.output_records(), frame, size_ms=SIZE_MS) == []


def test_a_function_per_window_killed_with_windows_open_gives_every_window_once(
        harness: JobHarness) -> None:
    """``window(...).process(fn)``: the windows' records kept in keyed state through a
    subtask kill under unaligned checkpoints, each window's function called once."""
    frame = clicks(COUNT)
    marker = harness.base / "crashed"
    args = {**prepare(harness, frame), **harness.crash_after_a_checkpoint(at=9_000)}
    run = harness.run(entrypoint="window_jobs:per_window_by_process", args=args,
                      extra=["--unaligned", "--credits", "2"])
    assert run.returncode == 0, run.explain()
    assert marker.exists(), "the subtask never reached the record that kills it"
    assert run.status is not None and run.status["restoredFrom"] is not None
    assert window_problems(harness.output_records(), frame, size_ms=SIZE_MS) == []


def test_a_driver_killed_mid_run_and_restarted_at_three_subtasks_gives_every_window_once(
        harness: JobHarness) -> None:
    """Killed after checkpoint 3 reached the store and before any subtask was told: the
    windows fired in its interval are committed by the restart, which reads on at
    another parallelism with the fired windows' key groups moved between subtasks."""
    frame = clicks(COUNT)
    args = prepare(harness, frame, files=6)
    harness.restart_at_three_after_a_driver_kill(entrypoint="window_jobs:per_window", args=args)
    assert window_problems(harness.output_records(), frame, size_ms=SIZE_MS) == []


def test_records_later_than_the_watermark_allows_are_dropped_and_the_rest_counted_once(
        harness: JobHarness) -> None:
    """One subtask, so the watermark a record meets is fixed by the input: a few records
    five minutes older than their neighbours, far past the 5 s the job allows."""
    frame = clicks(6_000)
    late = np.arange(3_000, 3_010)
    frame.loc[late, "ts"] -= 300_000
    args = prepare(harness, frame, files=1)
    run = harness.run(entrypoint="window_jobs:per_window", args=args, parallelism=1,
                      master="local[1]")
    assert run.returncode == 0, run.explain()
    on_time = frame.drop(index=late)
    assert JITTER_MS < 5_000
    assert window_problems(harness.output_records(), on_time, size_ms=SIZE_MS) == []
    # Counted, not silently dropped: the driver reports them.
    assert run.status is not None and run.status["lateRecords"] == len(late)
