"""``union`` on real Spark: clicks from two folders, each source with its own record
function and watermarks, counted per user and 10 s window. Through a subtask kill under
unaligned checkpoints and a driver kill restarted at another parallelism, every
window's row is committed once, with the values pandas computes over both folders'
clicks together.
"""

from __future__ import annotations

import pandas as pd
from runtime_harness import JobHarness, load_example

example = load_example("examples/clicks_per_minute/clicks.py")
verify = load_example("examples/clicks_per_minute/verify.py")

SIZE_MS = 10_000
COUNT = 16_000


def prepare(harness: JobHarness, frame: pd.DataFrame) -> dict[str, object]:
    """Odd and even clicks to two folders of three files each: the same users and
    times in both, so a window's row needs both sources' clicks."""
    example.write(harness.base / "first", frame.iloc[0::2], files=3)
    example.write(harness.base / "second", frame.iloc[1::2], files=3)
    return {"input": str(harness.base / "first"), "second_input": str(harness.base / "second"),
            "output": str(harness.output), "batch_size": 250, "pause": 0.03}


def test_a_subtask_killed_while_two_sources_are_read_loses_and_repeats_no_window(
        harness: JobHarness) -> None:
    frame = example.clicks(COUNT, users=40, step_ms=20, jitter_ms=3_000)
    marker = harness.base / "crashed"
    args = {**prepare(harness, frame), **harness.crash_after_a_checkpoint(at=9_000)}
    run = harness.run(entrypoint="union_jobs:per_window_of_two", args=args,
                      extra=["--unaligned", "--credits", "2"])
    assert run.returncode == 0, run.explain()
    assert marker.exists(), "the subtask never reached the click that kills it"
    assert run.status is not None and run.status["restoredFrom"] is not None
    assert run.status["lateRecords"] == 0
    assert verify.verify(harness.output_records(), frame, size_ms=SIZE_MS) == []


def test_a_driver_killed_and_restarted_at_three_subtasks_reads_both_sources_on_once(
        harness: JobHarness) -> None:
    frame = example.clicks(COUNT, users=40, step_ms=20, jitter_ms=3_000)
    args = prepare(harness, frame)
    harness.restart_at_three_after_a_driver_kill(entrypoint="union_jobs:per_window_of_two", args=args)
    assert verify.verify(harness.output_records(), frame, size_ms=SIZE_MS) == []
