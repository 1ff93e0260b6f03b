"""Pipelines that branch, on real Spark: a keyed operator's stream written to its main
sink and, through ``side_output(tag)``, to sinks of its own. The clicks too late for
every window they belong to go to a late-data branch, the rest are counted in their
windows as pandas counts them; a ``process`` function's records tagged with
``ctx.output`` (from ``on_timer`` too) go to their branches. Whatever is killed, a
subtask or the driver, every sink's committed output holds every record exactly once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
from runtime_harness import JobHarness, load_example, read_output

example = load_example("examples/clicks_per_minute/clicks.py")
verify = load_example("examples/clicks_per_minute/verify.py")

SIZE_MS = 10_000
COUNT = 20_000  # 400 s of event time, 4 files of 5,000 clicks
JITTER_MS = 3_000  # clicks come up to 3 s out of order; the jobs allow 5 s
MAX_DELAY_MS = 5_000
LATE_BY_MS = 600_000
BIG_AT = 90

LATE = np.concatenate([np.arange(start, start + 20)
                       for start in (11_000, 13_500, 14_900, 16_000, 18_500, 19_900)])
"""Clicks made ten minutes older than their neighbours. They are in the second file of
each of the two subtasks (files ``i`` and ``i + 2`` are read, in that order, by subtask
``i % 2``), at least 1,000 clicks into it: whenever one is read, both subtasks have
sent watermarks past the input's start, so it is too late for its window (which ends
more than five minutes before the input starts) on any schedule, and after a restore
too (each key group keeps the time up to which it fired). No other click is ever late:
each is at most ``JITTER_MS`` older than any click read before it in its file, and a
file's clicks are all later than those of the files its subtask read before it."""


def clicks() -> pd.DataFrame:
    frame: pd.DataFrame = example.clicks(COUNT, users=50, step_ms=20, jitter_ms=JITTER_MS)
    return frame


def with_late_clicks() -> pd.DataFrame:
    frame = clicks()
    frame.loc[LATE, "ts"] -= LATE_BY_MS
    assert JITTER_MS < MAX_DELAY_MS
    return frame


def prepare(harness: JobHarness, frame: pd.DataFrame, *, files: int = 4) -> dict[str, Any]:
    example.write(harness.base / "input", frame, files=files)
    return {"input": str(harness.base / "input"), "output": str(harness.output),
            "late_output": str(harness.base / "late"), "big_output": str(harness.base / "big"),
            "totals_output": str(harness.base / "totals"), "batch_size": 250, "pause": 0.04,
            "max_delay": f"{MAX_DELAY_MS}ms", "big_at": BIG_AT}


def as_clicks(rows: pd.DataFrame) -> list[dict[str, Any]]:
    return [{"seq": int(seq), "user": str(user), "ts": int(ts), "amount": int(amount)}
            for seq, user, ts, amount in zip(rows["seq"], rows["user"], rows["ts"],
                                             rows["amount"], strict=True)]


def late_problems(records: list[dict[str, Any]], frame: pd.DataFrame) -> list[str]:
    """Empty when the late sink holds the clicks of ``LATE``, each once and unchanged."""
    expected = {click["seq"]: click for click in as_clicks(frame.loc[LATE])}
    found: list[str] = []
    seen = Counter(int(record["seq"]) for record in records)
    found += [f"late click {seq}: written {n} times" for seq, n in seen.items() if n > 1]
    found += [f"late click {seq}: never written" for seq in expected if seq not in seen]
    for record in records:
        want = expected.get(int(record["seq"]))
        if want is None:
            found.append(f"{record}: not a late click")
        elif {name: record.get(name) for name in want} != want:
            found.append(f"{record}: expected {want}")
    return found


def window_problems(records: list[dict[str, Any]], frame: pd.DataFrame) -> list[str]:
    """Empty when every window of the clicks not in ``LATE`` was committed once, with
    the count and total pandas computes."""
    found: list[str] = verify.verify(records, frame.drop(index=LATE), size_ms=SIZE_MS)
    return found


def numbering_problems(harness: JobHarness, frame: pd.DataFrame) -> list[str]:
    """What ``branch_jobs:process_side_output`` committed wrong, in any of its three
    sinks (empty: each exactly once, and the branches agree with the main output)."""
    main = harness.output_records()
    big = read_output(harness.base / "big")
    totals = read_output(harness.base / "totals")
    clicks_by_seq = {click["seq"]: click for click in as_clicks(frame)}
    found: list[str] = []

    # Main: every click once, numbered 1..k among its user's k clicks.
    seen = Counter(int(record["seq"]) for record in main)
    found += [f"click {seq}: written {n} times" for seq, n in seen.items() if n > 1]
    found += [f"click {seq}: never written" for seq in clicks_by_seq if seq not in seen]
    numbers: dict[str, list[int]] = {}
    for record in main:
        click = clicks_by_seq.get(int(record["seq"]))
        if click is None or (record["user"], record["amount"]) != (click["user"],
                                                                   click["amount"]):
            found.append(f"{record}: not a click of the input ({click})")
        numbers.setdefault(str(record["user"]), []).append(int(record["n"]))
    counts = frame["user"].value_counts()
    for user, count in counts.items():
        if sorted(numbers.get(str(user), [])) != list(range(1, int(count) + 1)):
            found.append(f"user {user}: numbers are not 1..{count}")

    # Big: the clicks of a big amount, once, numbered as in the main output.
    numbered = {int(record["seq"]): record for record in main}
    want_big = {int(seq) for seq in frame.loc[frame["amount"] >= BIG_AT, "seq"]}
    seen_big = Counter(int(record["seq"]) for record in big)
    found += [f"big click {seq}: written {n} times" for seq, n in seen_big.items() if n > 1]
    found += [f"big click {seq}: never written" for seq in want_big if seq not in seen_big]
    for record in big:
        seq = int(record["seq"])
        main_record = numbered.get(seq)
        if seq not in want_big:
            found.append(f"{record}: not a click of a big amount")
        elif main_record is None or (record["user"], record["n"], record["big"]) != (
                main_record["user"], main_record["n"], main_record["amount"]):
            found.append(f"{record}: the main output has {main_record}")

    # Totals, from each user's timer at the end of the input: one row per user.
    seen_users = Counter(str(record["user"]) for record in totals)
    found += [f"user {user}: {n} totals" for user, n in seen_users.items() if n > 1]
    for user, count in counts.items():
        rows = [r for r in totals if str(r["user"]) == str(user)]
        if not rows:
            found.append(f"user {user}: no total")
        elif int(rows[0]["clicks"]) != int(count):
            found.append(f"user {user}: total {rows[0]['clicks']}, expected {count}")
    found += [f"{r}: a user the input does not have" for r in totals
              if str(r["user"]) not in {str(u) for u in counts.index}]
    return found


def test_clicks_too_late_for_their_window_go_to_the_late_sink_once_and_the_windows_count_the_rest(
        harness: JobHarness) -> None:
    frame = with_late_clicks()
    run = harness.run(entrypoint="branch_jobs:late_routed", args=prepare(harness, frame))
    assert run.returncode == 0, run.explain()
    problems = window_problems(harness.output_records(), frame)
    assert not problems, "\n".join(problems)
    problems = late_problems(read_output(harness.base / "late"), frame)
    assert not problems, "\n".join(problems)
    # Routed and still counted.
    assert run.status is not None and run.status["lateRecords"] == len(LATE)


def test_a_subtask_killed_between_late_clicks_leaves_each_window_and_each_late_click_once(
        harness: JobHarness) -> None:
    """Killed at a click after some late clicks were read and before others, under
    unaligned checkpoints: both sinks restored to the same checkpoint."""
    frame = with_late_clicks()
    marker = harness.base / "crashed"
    args = {**prepare(harness, frame), **harness.crash_after_a_checkpoint(at=12_000)}
    run = harness.run(entrypoint="branch_jobs:late_routed", args=args,
                      extra=["--unaligned", "--credits", "2"])
    assert run.returncode == 0, run.explain()
    assert marker.exists(), "the subtask never reached the click that kills it"
    assert run.status is not None and run.status["restoredFrom"] is not None
    problems = window_problems(harness.output_records(), frame)
    assert not problems, "\n".join(problems)
    problems = late_problems(read_output(harness.base / "late"), frame)
    assert not problems, "\n".join(problems)


def test_a_subtask_killed_while_a_process_function_writes_three_branches_loses_and_repeats_nothing(
        harness: JobHarness) -> None:
    frame = clicks()
    marker = harness.base / "crashed"
    args = {**prepare(harness, frame), **harness.crash_after_a_checkpoint(at=9_000)}
    run = harness.run(entrypoint="branch_jobs:process_side_output", args=args)
    assert run.returncode == 0, run.explain()
    assert marker.exists(), "the subtask never reached the click that kills it"
    assert run.status is not None and run.status["restoredFrom"] is not None
    problems = numbering_problems(harness, frame)
    assert not problems, "\n".join(problems[:50])


def test_a_driver_killed_before_notifying_a_checkpoint_and_restarted_at_three_subtasks_commits_every_branch_once(
        harness: JobHarness) -> None:
    """Killed after checkpoint 3 reached the store and before any subtask was told: the
    restart commits what every sink wrote in its interval, and reads on at another
    parallelism with the users' numbers and timers moved between subtasks."""
    frame = clicks()
    args = prepare(harness, frame, files=6)
    harness.restart_at_three_after_a_driver_kill(
        entrypoint="branch_jobs:process_side_output", args=args)
    problems = numbering_problems(harness, frame)
    assert not problems, "\n".join(problems[:50])
