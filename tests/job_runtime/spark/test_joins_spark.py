"""Orders joined with payments on real Spark, by each way two keyed streams meet (an
interval join, a window join, the user's co-process function over the key's shared
state): the pairs are exactly the ones a one-shot join of the inputs gives, each once,
also when a subtask dies mid-run and the job restores its checkpoint with both sides'
state, and when a driver dies and the job restarts at three subtasks instead of two."""

from __future__ import annotations

import join_jobs
import pytest
from runtime_harness import JobHarness

ORDERS = 1_500


def pairs(harness: JobHarness) -> list[tuple[int, int, int]]:
    return sorted((r["order"], r["ordered"], r["paid"]) for r in harness.output_records())


@pytest.mark.parametrize("kind", join_jobs.KINDS)
def test_the_join_gives_every_pair_once_through_a_subtask_kill(
        kind: str, harness: JobHarness) -> None:
    join_jobs.write_inputs(harness.base, orders=ORDERS)
    expected = join_jobs.reference(harness.base, kind=kind)
    assert len(expected) > ORDERS // 4, "the inputs should pair often"
    marker = harness.base / "crashed"
    # Unaligned barriers over the two inputs (the records in flight from both sides in
    # the checkpoint), with a crash while the payments, read at once, have ended and
    # the orders, slowed down, go on.
    run = harness.run(entrypoint="join_jobs:joined", args={
        "orders": str(harness.base / "orders"), "payments": str(harness.base / "payments"),
        "output": str(harness.output), "crash_at": ORDERS // 2, "crash_marker": str(marker),
        "batch_size": 50, "delay_ms": 2, "kind": kind}, extra=["--unaligned", "--credits", "2"])
    assert run.returncode == 0, run.explain()
    assert marker.exists(), "the subtask never reached the record that kills it"
    assert run.status is not None and run.status["restoredFrom"] is not None
    assert pairs(harness) == expected


@pytest.mark.parametrize("kind", join_jobs.KINDS)
def test_a_driver_killed_and_restarted_at_three_subtasks_pairs_every_order_once(
        kind: str, harness: JobHarness) -> None:
    join_jobs.write_inputs(harness.base, orders=ORDERS)
    args = {"orders": str(harness.base / "orders"), "payments": str(harness.base / "payments"),
            "output": str(harness.output), "batch_size": 50, "delay_ms": 3, "kind": kind}
    # Both sides' waiting records, in the key groups of two subtasks, go to three.
    harness.restart_at_three_after_a_driver_kill(entrypoint="join_jobs:joined", args=args)
    assert pairs(harness) == join_jobs.reference(harness.base, kind=kind)
