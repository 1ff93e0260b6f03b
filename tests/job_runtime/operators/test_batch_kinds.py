"""A batch says what its rows are: records, or a combiner's partial aggregates.

The keyed operator of an ``aggregate`` counts records and adds up partial counts, so
taking one for the other changes results. The kind is set where a batch is made and
travels with it, over a channel too; only rows kept in a checkpoint's channel state
have their kind read back from their columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from job_runtime import Pipeline
from job_runtime.network.framing import Kind, decode_batch, encode_batch
from job_runtime.operators.accumulators import PARTIAL_PREFIX, kind_of_columns
from job_runtime.operators.combiner import Combiner
from job_runtime.operators.keyed import AggregateOperator, build_keyed_operator
from job_runtime.pipeline import KeyedOp
from job_runtime.records import Batch, BatchKind, key_group_range, split_by_target
from job_runtime.sinks import discard
from job_runtime.sources import sequence

MAX_P = 128


def counting_op() -> KeyedOp:
    p = Pipeline(args={})
    p.source(sequence(count=1)).key_by("k").aggregate(n="count").sink(discard())
    return p.keyed_ops[0]


def aggregate_operator() -> AggregateOperator:
    built = build_keyed_operator(op=counting_op(), subtask=0, max_parallelism=MAX_P,
                                 key_groups=key_group_range(0, parallelism=1,
                                                            max_parallelism=MAX_P))
    assert isinstance(built, AggregateOperator)
    return built


def counts(batch: Batch) -> dict[Any, int]:
    return {row["k"]: row["n"] for row in batch.rows}


def partial_counts() -> Batch:
    combiner = Combiner(op=counting_op())
    combiner.add(Batch(arrow=pa.RecordBatch.from_pydict({"k": [1, 1, 2, 1]})))
    flushed = combiner.flush()
    assert flushed is not None
    return flushed


def test_records_whose_columns_look_like_partials_are_counted_as_records() -> None:
    """A user's column may carry any name; it does not turn records into partials."""
    records = pa.RecordBatch.from_pydict({"k": [1, 1, 2], PARTIAL_PREFIX + "count": [50, 50, 7]})

    out = aggregate_operator().process(Batch(arrow=records))

    assert counts(out) == {1: 2, 2: 1}


def test_a_combiners_batch_is_partial_and_its_counts_are_added_up() -> None:
    partial = partial_counts()

    assert partial.kind is BatchKind.PARTIAL
    assert counts(aggregate_operator().process(partial)) == {1: 3, 2: 1}


def test_a_partial_batch_crosses_a_channel_as_partial_and_records_as_records() -> None:
    partial = partial_counts()
    frame, payload = encode_batch(partial)
    assert frame == Kind.PARTIAL
    assert decode_batch(frame, payload).kind is BatchKind.PARTIAL
    assert counts(aggregate_operator().process(decode_batch(frame, payload))) == {1: 3, 2: 1}

    for records in (Batch(arrow=pa.RecordBatch.from_pydict({"k": [1]})), Batch(rows=[{"k": 1}])):
        frame, payload = encode_batch(records)
        assert frame in (Kind.ARROW, Kind.ROWS)
        assert decode_batch(frame, payload).kind is BatchKind.RECORDS


def test_a_partial_batch_kept_as_rows_is_partial_again_when_read_back() -> None:
    partial = partial_counts()
    kept = partial.rows

    assert kind_of_columns(kept[0]) is BatchKind.PARTIAL
    assert kind_of_columns({"k": 1, "v": 2}) is BatchKind.RECORDS
    again = Batch(rows=kept, kind=kind_of_columns(kept[0]))
    assert counts(aggregate_operator().process(again)) == {1: 3, 2: 1}


def test_the_parts_of_a_batch_split_between_subtasks_keep_its_kind() -> None:
    partial = partial_counts()
    groups = np.array([0, 127])

    parts = split_by_target(partial, "k", parallelism=2, max_parallelism=MAX_P, groups=groups)

    assert len(parts) == 2
    assert all(part.kind is BatchKind.PARTIAL for _, part in parts)
