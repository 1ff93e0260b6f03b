"""The combiner in front of a windowed aggregate sends one partial row per key and window
instead of every record; the window operator folds them into the same rows it computes
from the records themselves, and counts the records of a late partial row, not the row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from job_runtime import Pipeline, sinks, sources, watermarks, windows
from job_runtime.execution.stages import plan_stages
from job_runtime.operators.keyed import build_keyed_operator
from job_runtime.operators.window_combiner import WindowCombiner
from job_runtime.records import Batch, key_group_range

MAX_P = 128


def window_op(assigner: windows.WindowAssigner, *, lateness: str = "0s") -> Any:
    p = Pipeline()
    (p.source(sources.sequence(count=1),
              watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="1s"))
      .key_by("user")
      .window(assigner, allowed_lateness=lateness)
      .aggregate(n="count", total=("sum", "amount"), low=("min", "amount"),
                 avg=("mean", "amount"))
      .sink(sinks.discard()))
    keyed = plan_stages(p)[1].keyed
    assert keyed is not None
    return keyed


def operator(op: Any) -> Any:
    return build_keyed_operator(op=op, subtask=0, max_parallelism=MAX_P,
                                key_groups=key_group_range(0, parallelism=1, max_parallelism=MAX_P))


def random_clicks(n: int, *, seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    return Batch(arrow=pa.RecordBatch.from_pydict({
        "user": [f"u{k}" for k in rng.integers(0, 30, size=n)],
        "ts": rng.integers(0, 120_000, size=n),
        "amount": rng.integers(1, 100, size=n),
    }))


def rows(batch: Batch) -> list[tuple[Any, ...]]:
    return sorted((r["user"], r["window_start"], r["window_end"], r["n"], r["total"],
                   r["low"], round(r["avg"], 9)) for r in batch.rows)


@pytest.mark.parametrize("assigner", [windows.tumbling("10s"), windows.sliding("30s", every="10s")],
                         ids=["tumbling", "sliding"])
def test_partial_rows_give_the_same_windows_as_the_records(assigner: windows.WindowAssigner) -> None:
    op = window_op(assigner)
    direct, combined = operator(op), operator(op)
    combiner = WindowCombiner(op=op, subtask=0)
    for seed in range(4):
        batch = random_clicks(2_000, seed=seed)
        direct.process(batch)
        combiner.add(batch)
    partial = combiner.flush()
    assert partial is not None and len(partial) < 4 * 2_000 * 3
    assert combiner.flush() is None, "a flush empties the buffer"
    combined.process(partial)
    assert rows(combined.on_watermark(10**15)) == rows(direct.on_watermark(10**15))


def test_a_late_partial_row_counts_every_record_it_stands_for() -> None:
    op = window_op(windows.tumbling("10s"))
    window = operator(op)
    window.on_watermark(50_000)
    combiner = WindowCombiner(op=op, subtask=0)
    combiner.add(Batch(rows=[{"user": "a", "ts": 1_000 + i, "amount": 1} for i in range(7)]))
    partial = combiner.flush()
    assert partial is not None and len(partial) == 1
    assert len(window.process(partial)) == 0
    assert window.late_records == 7
