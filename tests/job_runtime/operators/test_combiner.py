"""The combiner before an ``aggregate``'s exchange changes how much crosses it, not the result."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from job_runtime import Pipeline
from job_runtime.errors import UserCodeError
from job_runtime.execution.stages import plan_stages
from job_runtime.operators.accumulators import (
    PARTIAL_PREFIX,
    accumulator_specs,
    fold,
    fold_keys,
    kind_of_columns,
)
from job_runtime.operators.combiner import Combiner
from job_runtime.operators.key_numbering import factorize_keys
from job_runtime.operators.keyed import AggregateOperator, build_keyed_operator
from job_runtime.pipeline import KeyedOp
from job_runtime.records import (
    Batch,
    BatchKind,
    key_group_of,
    key_group_range,
    key_groups_of_array,
    split_by_target,
)
from job_runtime.sinks import discard
from job_runtime.sources import sequence

MAX_P = 128
PARALLELISM = 3


def aggregate_op(**outputs: Any) -> KeyedOp:
    p = Pipeline(args={})
    p.source(sequence(count=1)).key_by("k").aggregate(**outputs).sink(discard())
    return p.keyed_ops[0]


EVERY_FUNCTION = {"n": "count", "total": ("sum", "v"), "low": ("min", "v"),
                  "high": ("max", "v"), "avg": ("mean", "v")}


def random_batches(rng: random.Random, *, string_keys: bool) -> list[Batch]:
    """Batches of random sizes over a random number of keys, values of either sign."""
    keys = rng.randint(1, 60)
    batches = []
    for _ in range(rng.randint(1, 25)):
        size = rng.randint(1, 300)
        ks = [rng.randrange(keys) for _ in range(size)]
        column: list[Any] = [f"user-{k}" for k in ks] if string_keys else ks
        values = [rng.choice([rng.randint(-1000, 1000), rng.uniform(-50, 50)])
                  for _ in range(size)]
        batches.append(Batch(arrow=pa.RecordBatch.from_pydict({"k": column, "v": values})))
    return batches


def operators(op: KeyedOp) -> list[AggregateOperator]:
    built = [build_keyed_operator(op=op, subtask=i, max_parallelism=MAX_P,
                                  key_groups=key_group_range(i, parallelism=PARALLELISM,
                                                             max_parallelism=MAX_P))
             for i in range(PARALLELISM)]
    return [o for o in built if isinstance(o, AggregateOperator)]


def exchange(ops: list[AggregateOperator], batch: Batch) -> list[Batch]:
    """What a task does with a batch: partition it by key group and hand each part over."""
    return [ops[target].process(part) for target, part in
            split_by_target(batch, "k", parallelism=PARALLELISM, max_parallelism=MAX_P)]


def final_values(outputs: Iterable[Batch]) -> dict[Any, dict[str, Any]]:
    latest: dict[Any, dict[str, Any]] = {}
    for batch in outputs:
        for row in batch.rows:
            latest[row["k"]] = row
    return latest


def without_combiner(op: KeyedOp, batches: list[Batch]) -> dict[Any, dict[str, Any]]:
    ops = operators(op)
    return final_values(out for b in batches for out in exchange(ops, b))


def with_combiner(op: KeyedOp, batches: list[Batch], rng: random.Random,
                  max_records: int) -> dict[Any, dict[str, Any]]:
    ops = operators(op)
    combiner = Combiner(op=op, max_records=max_records, max_delay=3600.0)
    outputs: list[Batch] = []
    for batch in batches:
        combiner.add(batch)
        # Flushes where a barrier would force them, and where the buffer is full.
        if combiner.due() or rng.random() < 0.3:
            partial = combiner.flush()
            assert partial is not None
            outputs.extend(exchange(ops, partial))
    partial = combiner.flush()
    if partial is not None:
        outputs.extend(exchange(ops, partial))
    assert len(combiner) == 0
    return final_values(outputs)


def assert_same(expected: dict[Any, dict[str, Any]], got: dict[Any, dict[str, Any]]) -> None:
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        other = got[key]
        assert other["n"] == row["n"], key
        assert other["low"] == row["low"], key
        assert other["high"] == row["high"], key
        # Sums of floats may differ in their last bits: the combiner adds in another order.
        assert other["total"] == pytest.approx(row["total"], rel=1e-12, abs=1e-9), key
        assert other["avg"] == pytest.approx(row["avg"], rel=1e-12, abs=1e-9), key


class TestCombinedAggregates:
    @pytest.mark.parametrize("seed", range(12))
    def test_random_batches_give_the_same_aggregates_with_and_without_the_combiner(
            self, seed: int) -> None:
        rng = random.Random(seed)
        batches = random_batches(rng, string_keys=seed % 2 == 0)
        op = aggregate_op(**EVERY_FUNCTION)

        expected = without_combiner(op, batches)
        got = with_combiner(op, batches, rng, max_records=rng.choice([1, 50, 10_000]))

        assert_same(expected, got)

    def test_a_flush_sends_one_row_per_distinct_key(self) -> None:
        op = aggregate_op(n="count")
        combiner = Combiner(op=op)
        for start in range(0, 1000, 100):
            keys = [i % 7 for i in range(start, start + 100)]
            combiner.add(Batch(arrow=pa.RecordBatch.from_pydict({"k": keys, "v": keys})))

        partial = combiner.flush()

        assert partial is not None and partial.kind is BatchKind.PARTIAL
        rows = {r["k"]: r[PARTIAL_PREFIX + "count"] for r in partial.rows}
        assert rows == {k: len([i for i in range(1000) if i % 7 == k]) for k in range(7)}
        assert combiner.flush() is None

    def test_a_full_buffer_is_folded_and_held_not_sent(self) -> None:
        combiner = Combiner(op=aggregate_op(n="count"), max_records=250, max_delay=3600.0)
        batch = Batch(arrow=pa.RecordBatch.from_pydict({"k": [i % 10 for i in range(100)]}))
        for _ in range(30):
            combiner.add(batch)
        # 3,000 records in: folded every 250 into 10 rows; held, not due.
        assert len(combiner) < 250 and not combiner.due()
        partial = combiner.flush()
        assert partial is not None
        assert {r["k"]: r[PARTIAL_PREFIX + "count"] for r in partial.rows} == {
            k: 300 for k in range(10)}

    def test_partial_rows_that_folding_cannot_shrink_are_due_at_max_records(self) -> None:
        # Every key distinct: folding keeps as many rows as records, so the memory
        # bound sends them.
        combiner = Combiner(op=aggregate_op(n="count"), max_records=250, max_delay=3600.0)
        for start in range(0, 200, 100):
            combiner.add(Batch(arrow=pa.RecordBatch.from_pydict(
                {"k": list(range(start, start + 100))})))
        assert not combiner.due()
        combiner.add(Batch(arrow=pa.RecordBatch.from_pydict({"k": list(range(200, 300))})))
        assert combiner.due()
        partial = combiner.flush()
        assert partial is not None and partial.arrow.num_rows == 300

    def test_the_oldest_record_makes_the_held_rows_due_after_max_delay(self) -> None:
        combiner = Combiner(op=aggregate_op(n="count"), max_records=10, max_delay=0.05)
        combiner.add(Batch(arrow=pa.RecordBatch.from_pydict({"k": [1] * 30})))
        assert not combiner.due()
        time.sleep(0.06)
        assert combiner.due()

    def test_the_key_column_keeps_its_type_through_the_combiner(self) -> None:
        combiner = Combiner(op=aggregate_op(total=("sum", "v")))
        combiner.add(Batch(arrow=pa.RecordBatch.from_arrays(
            [pa.array([1, 2, 1], type=pa.int32()), pa.array([1.0, 2.0, 3.0])],
            names=["k", "v"])))
        partial = combiner.flush()
        assert partial is not None
        assert partial.arrow.schema.field("k").type == pa.int32()

    def test_records_and_partials_can_follow_each_other_into_one_operator(self) -> None:
        # After a restore, records kept as channel state by an older runtime are
        # replayed before the partials of the current one arrive.
        op = aggregate_op(**EVERY_FUNCTION)
        rng = random.Random(99)
        batches = random_batches(rng, string_keys=False)
        expected = without_combiner(op, batches)

        ops = operators(op)
        outputs = [out for b in batches[:len(batches) // 2] for out in exchange(ops, b)]
        combiner = Combiner(op=op)
        for batch in batches[len(batches) // 2:]:
            combiner.add(batch)
        partial = combiner.flush()
        if partial is not None:
            outputs.extend(exchange(ops, partial))

        assert_same(expected, final_values(outputs))

    def test_partials_of_an_unknown_format_are_refused_with_the_reason(self) -> None:
        operator = operators(aggregate_op(n="count", total=("sum", "v")))[0]
        # As a restore reads them from the channel state of another runtime's checkpoint.
        foreign = pa.RecordBatch.from_pydict({"k": [1], "__cjob_partial_v9:count": [3]})
        kind = kind_of_columns(foreign.schema.names)

        with pytest.raises(UserCodeError) as caught:
            operator.process(Batch(arrow=foreign, kind=kind))

        assert "version 1" in str(caught.value.details)


COUNTS_AND_SUMS = {"n": "count", "total": ("sum", "v"), "avg": ("mean", "v")}


COUNTS_AND_SUMS_SPECS = accumulator_specs(aggregate_op(**COUNTS_AND_SUMS).aggregates)


def _by_key(uniques: pa.Array, folded: dict[str, np.ndarray]) -> dict[Any, dict[str, float]]:
    return {key: {name: float(v[i]) for name, v in folded.items()}
            for i, key in enumerate(uniques.to_pylist())}


def _numbered_fold(keys: pa.Array, values: dict[str, np.ndarray], *, partial: bool
                   ) -> dict[Any, dict[str, float]]:
    """The fold by numbering the keys first: what string keys got before Arrow folded them."""
    codes, uniques = factorize_keys(keys)
    return _by_key(uniques, fold(column=values.__getitem__, codes=codes,
                                 n_unique=len(uniques), specs=COUNTS_AND_SUMS_SPECS,
                                 partial=partial))


def _arrow_fold(keys: pa.Array, values: dict[str, np.ndarray], *, partial: bool
                ) -> dict[Any, dict[str, float]]:
    uniques, folded = fold_keys(keys=keys, column=values.__getitem__,
                                specs=COUNTS_AND_SUMS_SPECS, partial=partial)
    assert folded["count"].dtype == np.int64
    assert len(set(uniques.to_pylist())) == len(uniques)
    return _by_key(uniques, folded)


def _same_floats(expected: dict[Any, dict[str, float]], got: dict[Any, dict[str, float]]) -> None:
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        for name, value in row.items():
            if np.isnan(value):
                assert np.isnan(got[key][name]), (key, name)
            else:
                assert got[key][name] == value, (key, name)


class TestArrowFold:
    """String and binary keys with counts and sums are folded by Arrow's grouped
    aggregation; it must give what numbering the keys and summing with numpy gives."""

    @pytest.mark.parametrize("kind", [pa.string(), pa.large_string(), pa.binary()])
    def test_records_fold_to_the_same_counts_and_sums_as_numbered_keys(
            self, kind: pa.DataType) -> None:
        rng = random.Random(5)
        words = [None if rng.random() < 0.1 else f"user-{rng.randrange(40)}"
                 for _ in range(3000)]
        raw = [None if w is None else (w.encode() if kind == pa.binary() else w)
               for w in words]
        keys = pa.array(raw, type=kind)
        # A null value is NaN to numpy: its key's sum is NaN, as a NaN value makes it.
        amounts = pa.array([None if i % 97 == 0 else float("nan") if i % 89 == 0
                            else float(rng.randint(-50, 50)) for i in range(len(raw))])
        values = {"v": np.asarray(amounts.to_numpy(zero_copy_only=False))}

        _same_floats(_numbered_fold(keys, values, partial=False),
                     _arrow_fold(keys, values, partial=False))

    def test_partial_rows_fold_to_the_same_counts_and_sums_as_numbered_keys(self) -> None:
        rng = random.Random(8)
        keys = pa.array([None if rng.random() < 0.05 else f"k{rng.randrange(30)}"
                         for _ in range(500)])
        values = {PARTIAL_PREFIX + "count": np.array([rng.randint(1, 9) for _ in range(500)],
                                                     dtype=np.int64),
                  PARTIAL_PREFIX + "sum:v": np.array([rng.uniform(-5, 5) for _ in range(500)])}

        expected = _numbered_fold(keys, values, partial=True)
        got = _arrow_fold(keys, values, partial=True)

        assert got.keys() == expected.keys()
        for key, row in expected.items():
            assert got[key]["count"] == row["count"]
            assert got[key]["sum:v"] == pytest.approx(row["sum:v"], rel=1e-12, abs=1e-12)

    @pytest.mark.parametrize("seed", range(6))
    def test_random_batches_give_the_same_counts_and_sums_with_and_without_the_combiner(
            self, seed: int) -> None:
        rng = random.Random(100 + seed)
        batches = random_batches(rng, string_keys=True)
        op = aggregate_op(**COUNTS_AND_SUMS)

        expected = without_combiner(op, batches)
        got = with_combiner(op, batches, rng, max_records=rng.choice([1, 50, 10_000]))

        assert got.keys() == expected.keys()
        for key, row in expected.items():
            assert got[key]["n"] == row["n"]
            assert got[key]["total"] == pytest.approx(row["total"], rel=1e-12, abs=1e-9)

    def test_batches_whose_columns_change_type_fold_to_the_same_counts_and_sums(self) -> None:
        op = aggregate_op(**COUNTS_AND_SUMS)
        batches = [
            Batch(arrow=pa.RecordBatch.from_pydict({"k": ["a", "b", "a"], "v": [1, 2, None]})),
            Batch(arrow=pa.RecordBatch.from_arrays(
                [pa.array(["b", "c"], type=pa.large_string()), pa.array([0.5, 4.0])],
                names=["k", "v"])),
            Batch(arrow=pa.RecordBatch.from_pydict({"k": ["c", None], "v": [1.5, 2.5]})),
        ]
        combiner = Combiner(op=op, max_records=10_000, max_delay=3600.0)
        for batch in batches:
            combiner.add(batch)
        partial = combiner.flush()
        assert partial is not None
        rows = {r["k"]: r for r in partial.rows}

        assert {k: r[PARTIAL_PREFIX + "count"] for k, r in rows.items()} == {
            "a": 2, "b": 2, "c": 2, None: 1}
        assert np.isnan(rows["a"][PARTIAL_PREFIX + "sum:v"])
        assert rows["b"][PARTIAL_PREFIX + "sum:v"] == 2.5
        assert rows["c"][PARTIAL_PREFIX + "sum:v"] == 5.5
        assert rows[None][PARTIAL_PREFIX + "sum:v"] == 2.5

    def test_a_null_integer_value_makes_its_keys_sum_nan_as_without_the_combiner(
            self) -> None:
        op = aggregate_op(**COUNTS_AND_SUMS)
        batches = [Batch(arrow=pa.RecordBatch.from_pydict(
            {"k": ["a", "b", "a", "c"], "v": pa.array([1, 2, None, 7], type=pa.int64())}))
            for _ in range(3)]

        expected = without_combiner(op, batches)
        got = with_combiner(op, batches, random.Random(1), max_records=10_000)

        assert np.isnan(expected["a"]["total"]) and np.isnan(got["a"]["total"])
        assert got["a"]["n"] == expected["a"]["n"] == 6
        assert got["b"]["total"] == expected["b"]["total"] == 6.0
        assert got["c"]["total"] == expected["c"]["total"] == 21.0


class TestFactorize:
    @pytest.mark.parametrize("keys", [
        np.array([5, 3, 5, 9, 3, 3], dtype=np.int64),
        np.array([-4, 7, -4, 0], dtype=np.int32),
        np.array([2**63 - 1, -(2**63), 0, 2**63 - 1], dtype=np.int64),
        np.array([10**12, 1, 10**12], dtype=np.int64),
        np.array([7, 7, 1], dtype=np.uint64),
        np.array(["b", "a", "b"], dtype=object),
        np.array([], dtype=np.int64),
    ], ids=["dense", "negative", "extremes", "sparse", "unsigned", "strings", "empty"])
    def test_codes_number_the_distinct_keys(self, keys: np.ndarray) -> None:
        codes, uniques = factorize_keys(pa.array(keys))
        assert len(set(uniques.to_pylist())) == len(uniques) == len(set(keys.tolist()))
        assert uniques.take(pa.array(codes, type=pa.int64())).to_pylist() == keys.tolist()


class TestPartitioning:
    def test_partial_rows_go_to_the_subtask_their_records_went_to(self) -> None:
        keys = [*range(-500, 500), 2**40, 2**62]
        batch = Batch(arrow=pa.RecordBatch.from_pydict({"k": keys, "v": [1] * len(keys)}))
        combiner = Combiner(op=aggregate_op(n="count"))
        combiner.add(batch)
        partial = combiner.flush()
        assert partial is not None

        raw = {r["k"]: t for t, part in split_by_target(batch, "k", parallelism=PARALLELISM,
                                                        max_parallelism=MAX_P)
               for r in part.rows}
        combined = {r["k"]: t for t, part in split_by_target(
            partial, "k", parallelism=PARALLELISM, max_parallelism=MAX_P) for r in part.rows}
        assert combined == raw

    def test_key_groups_are_those_older_checkpoints_were_written_with(self) -> None:
        # Pinned values: a checkpoint's state is found by key group, so a change of
        # the hash or of the group arithmetic would lose restored state.
        keys: list[Any] = [0, 1, 42, -7, 2**40, "a", "user-7", 3.5, 2.0, None, True,
                           (1, "x"), b"raw"]
        assert [key_group_of(k, 128) for k in keys] == PINNED_GROUPS
        integers = pa.array([0, 1, 42, -7, 2**40])
        assert key_groups_of_array(integers, 128).tolist() == PINNED_GROUPS[:5]
        assert np.all(key_groups_of_array(pa.array(["a", "user-7"]), 128)
                      == PINNED_GROUPS[5:7])


PINNED_GROUPS = [47, 65, 21, 112, 9, 110, 49, 65, 78, 0, 65, 65, 93]


class TestStagePlan:
    def test_the_stage_before_an_aggregate_combines(self) -> None:
        p = Pipeline(args={})
        p.source(sequence(count=1)).key_by("seq").aggregate(n="count").sink(discard())
        stages = plan_stages(p)
        assert stages[0].combine is not None and stages[0].combine.kind == "aggregate"
        assert stages[1].combine is None

    def test_a_reduce_gets_every_record(self) -> None:
        p = Pipeline(args={})
        p.source(sequence(count=1)).key_by("seq").reduce(lambda a, b: a).sink(discard())
        assert plan_stages(p)[0].combine is None
