"""A batch's event times are read from their column once and travel with the batch.

The source task reads them for its watermarks; the window combiner of the same stage
assigns windows from the same times without parsing the column again, and the parts
a batch is cut into for the exchange carry the times of their own rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from test_window_combiner import window_op

from job_runtime import windows
from job_runtime.event_time import EventTimes, TimeKind
from job_runtime.operators.window_combiner import WindowCombiner
from job_runtime.records import Batch, split_by_target
from job_runtime.watermarks import event_times


def clicks() -> Batch:
    return Batch(arrow=pa.RecordBatch.from_pydict({
        "user": ["a", "b", "a", "c"],
        "ts": pa.array([1_000, 12_000, 25_000, 3_000], type=pa.timestamp("ms", tz="UTC")),
        "amount": [1, 2, 3, 4],
    }))


def test_the_times_read_once_are_the_times_the_next_step_gets() -> None:
    batch = clicks()

    first, kind = event_times(batch, column="ts", operator="source", subtask=0)

    assert kind is TimeKind.TIMESTAMP
    assert first.tolist() == [1_000, 12_000, 25_000, 3_000]
    again, _ = event_times(batch, column="ts", operator="window", subtask=0)
    assert again is first


def test_the_window_combiner_assigns_windows_by_the_times_the_batch_carries() -> None:
    """Times the source read (here: other than the column's, to tell them apart)
    decide the windows; the column is not parsed again."""
    op = window_op(windows.tumbling("10s"))
    batch = clicks()
    batch.times = EventTimes(column="ts", millis=np.array([50_000] * 4, dtype=np.int64),
                             kind=TimeKind.EPOCH_MS)
    combiner = WindowCombiner(op=op, subtask=0)

    combiner.add(batch)
    flushed = combiner.flush()

    assert flushed is not None
    assert {row["window_start"] for row in flushed.rows} == {50_000}


def test_another_column_is_read_afresh() -> None:
    batch = clicks()
    event_times(batch, column="ts", operator="source", subtask=0)

    amounts, kind = event_times(batch, column="amount", operator="window", subtask=0)

    assert kind is TimeKind.EPOCH_MS
    assert amounts.tolist() == [1, 2, 3, 4]


def test_the_parts_of_a_batch_carry_the_times_of_their_rows() -> None:
    batch = clicks()
    event_times(batch, column="ts", operator="source", subtask=0)

    parts = dict(split_by_target(batch, "user", parallelism=2, max_parallelism=2,
                                 groups=np.array([0, 1, 0, 1])))

    for target, expected in ((0, [1_000, 25_000]), (1, [12_000, 3_000])):
        part = parts[target]
        assert part.times is not None
        assert part.times.millis.tolist() == expected
        assert [int(t.timestamp() * 1000) for t in part.arrow.column("ts").to_pylist()] == expected
