"""Timers and TTL state in ``process()`` on real Spark: the sessions example's
hand-written sessions (an event-time timer per click time and per open session, a
session counter with a TTL) over clicks up to 3 s out of order, checked against
the sessions pandas computes. Killed with timers pending, under unaligned
checkpoints, and restarted at another parallelism on the ``rocksdb`` backend, every
session's row is committed exactly once, numbered right.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from runtime_harness import JobHarness, load_example

clicks_example = load_example("examples/clicks_per_minute/clicks.py")
verify = load_example("examples/sessions/verify.py")

GAP_MS = 2_000
COUNT = 20_000


def clicks() -> pd.DataFrame:
    frame: pd.DataFrame = clicks_example.clicks(COUNT, users=50, step_ms=20, jitter_ms=3_000)
    return frame


def session_problems(harness: JobHarness, frame: pd.DataFrame) -> list[str]:
    found: list[str] = verify.verify(harness.output_records(), frame, gap_ms=GAP_MS,
                                     numbered=True)
    return found


def prepare(harness: JobHarness, frame: pd.DataFrame, *, files: int = 4) -> dict[str, Any]:
    clicks_example.write(harness.base / "input", frame, files=files)
    return {"input": str(harness.base / "input"), "output": str(harness.output),
            "batch_size": 250, "pause": 0.04, "gap": f"{GAP_MS}ms"}


def test_a_subtask_killed_with_timers_pending_under_unaligned_checkpoints_loses_and_repeats_nothing(
        harness: JobHarness) -> None:
    frame = clicks()
    marker = harness.base / "crashed"
    args = {**prepare(harness, frame), **harness.crash_after_a_checkpoint(at=9_000)}
    run = harness.run(entrypoint="timer_jobs:sessions_by_timers", args=args,
                      extra=["--unaligned", "--credits", "2"])
    assert run.returncode == 0, run.explain()
    assert marker.exists(), "the subtask never reached the record that kills it"
    assert run.status is not None and run.status["restoredFrom"] is not None
    problems = session_problems(harness, frame)
    assert not problems, "\n".join(problems)


def test_a_driver_killed_and_restarted_at_three_subtasks_on_rocksdb_fires_each_timer_once(
        harness: JobHarness) -> None:
    """Killed after checkpoint 3 reached the store and before any subtask was told; the
    restart reads on at another parallelism, the timers and TTL counters of the moved
    key groups restored from incremental RocksDB checkpoints on their new subtasks."""
    frame = clicks()
    args = prepare(harness, frame, files=6)
    rocksdb = ["--state-backend", "rocksdb"]
    first = harness.run(entrypoint="timer_jobs:sessions_by_timers", args=args, extra=rocksdb,
                        env={"CJOB_FAULTS": "driver.before-notify@3"})
    assert first.returncode == -9, first.explain()
    second = harness.run(entrypoint="timer_jobs:sessions_by_timers", args=args, attempt=2,
                         parallelism=3, master="local[3]",
                         extra=[*rocksdb, "--restore", "latest"])
    assert second.returncode == 0, second.explain()
    assert second.status is not None and second.status["restoredFrom"]["id"] == 3
    problems = session_problems(harness, frame)
    assert not problems, "\n".join(problems)
