"""``aggregate`` over keys of every type: the same results as grouping in Python, through
the combiner, the exchange and the keyed operator, and after a restore at another
parallelism, with every key in its own key group."""

from __future__ import annotations

import datetime
import math
import pickle
import random
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from job_runtime import Pipeline, sinks, sources, watermarks, windows
from job_runtime.execution.stages import plan_stages
from job_runtime.key_hashing import key_group_of, key_groups_of_array
from job_runtime.operators.accumulators import KEY_IDENTITY, kind_of_columns, partial_key_groups
from job_runtime.operators.combiner import Combiner
from job_runtime.operators.keyed import AggregateOperator, build_keyed_operator
from job_runtime.pipeline import KeyedOp
from job_runtime.records import Batch, key_group_range, split_by_target

MAX_P = 128


def _same(value: Any) -> Any:
    """A key as Python compares it, with one NaN."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def _zipf_words(count: int, *, seed: int, distinct: int) -> list[str]:
    rng = random.Random(seed)
    pool = [f"u{rng.randrange(10**12):012d}" for _ in range(distinct)]
    return [pool[min(int(rng.paretovariate(1.05)) - 1, distinct - 1)] for _ in range(count)]


def _key_columns() -> dict[str, list[Any]]:
    rng = random.Random(9)
    sparse = [rng.randrange(-(2**62), 2**62) for _ in range(60)]
    return {
        "zipf strings": _zipf_words(4000, seed=1, distinct=1500),
        "strings and nulls": [None if i % 9 == 0 else w
                              for i, w in enumerate(_zipf_words(3000, seed=2, distinct=80))],
        "sparse 64-bit integers": [rng.choice(sparse) for _ in range(3000)],
        "integers and nulls": [None if i % 4 == 0 else i % 31 for i in range(2000)],
        "floats with NaN and signed zeros": [
            rng.choice([0.0, -0.0, 1.5, float("nan"), 2.0, float("inf"), -7.25])
            for _ in range(2000)],
        "booleans and nulls": [rng.choice([True, False, None]) for _ in range(1000)],
        "binary": [w.encode() for w in _zipf_words(2000, seed=3, distinct=50)],
        "dates": [datetime.date(2026, 1, 1 + i % 17) for i in range(1000)],
        "nulls only": [None] * 500,
    }


KEY_COLUMNS = _key_columns()


def aggregate_op() -> KeyedOp:
    p = Pipeline(args={})
    (p.source(sources.sequence(count=1)).key_by("k")
     .aggregate(n="count", total=("sum", "v"), low=("min", "v"), high=("max", "v"),
                avg=("mean", "v"))
     .sink(sinks.discard()))
    return p.keyed_ops[0]


def records_of(keys: list[Any]) -> list[tuple[Any, float]]:
    return [(key, float(i % 13) - 4.0) for i, key in enumerate(keys)]


def batches(records: list[tuple[Any, float]], size: int) -> Iterable[Batch]:
    for start in range(0, len(records), size):
        chunk = records[start:start + size]
        yield Batch(arrow=pa.RecordBatch.from_pydict({"k": [k for k, _ in chunk],
                                                      "v": [v for _, v in chunk]}))


def reference(records: list[tuple[Any, float]]) -> dict[Any, dict[str, Any]]:
    grouped: dict[Any, list[float]] = {}
    for key, value in records:
        grouped.setdefault(_same(key), []).append(value)
    return {key: {"n": len(values), "total": sum(values), "low": min(values),
                  "high": max(values), "avg": sum(values) / len(values)}
            for key, values in grouped.items()}


def operators_for(op: KeyedOp, parallelism: int) -> list[AggregateOperator]:
    built = [build_keyed_operator(op=op, subtask=i, max_parallelism=MAX_P,
                                  key_groups=key_group_range(i, parallelism=parallelism,
                                                             max_parallelism=MAX_P))
             for i in range(parallelism)]
    assert all(isinstance(o, AggregateOperator) for o in built)
    return [o for o in built if isinstance(o, AggregateOperator)]


def run(operators: list[AggregateOperator], records: list[tuple[Any, float]], *,
        combine: bool) -> dict[Any, dict[str, Any]]:
    """Records through a combiner (or not), the exchange's routing and the operators;
    the last row each key got."""
    latest: dict[Any, dict[str, Any]] = {}
    combiner = Combiner(op=operators[0].op, max_records=700, max_delay=1e9)
    for batch in batches(records, 250):
        if combine:
            combiner.add(batch)
            flushed = combiner.flush() if len(combiner) >= 700 else None
        else:
            flushed = batch
        _deliver(operators, flushed, latest)
    _deliver(operators, combiner.flush(), latest)
    return latest


def _deliver(operators: list[AggregateOperator], batch: Batch | None,
             latest: dict[Any, dict[str, Any]]) -> None:
    if batch is None:
        return
    # Routed as a task routes: a combiner's string keys by the identities they carry.
    groups = partial_key_groups(batch, MAX_P)
    for target, part in split_by_target(batch, "k", parallelism=len(operators),
                                        max_parallelism=MAX_P, groups=groups):
        for row in operators[target].process(part).rows:
            latest[_same(row.pop("k"))] = row


def assert_same(got: dict[Any, dict[str, Any]], expected: dict[Any, dict[str, Any]]) -> None:
    assert set(got) == set(expected)
    for key, row in expected.items():
        assert got[key] == pytest.approx(row), key


class TestEveryKeyType:
    @pytest.mark.parametrize("name", list(KEY_COLUMNS))
    @pytest.mark.parametrize("combine", [True, False], ids=["combined", "records"])
    def test_aggregates_per_key_equal_grouping_in_python(self, name: str,
                                                         combine: bool) -> None:
        records = records_of(KEY_COLUMNS[name])
        got = run(operators_for(aggregate_op(), 2), records, combine=combine)
        assert_same(got, reference(records))

    def test_keys_arrive_in_their_columns_type(self) -> None:
        op = operators_for(aggregate_op(), 1)[0]
        batch = pa.RecordBatch.from_pydict({"k": pa.array([3, 1, 3], type=pa.int16()),
                                            "v": [1.0, 2.0, 3.0]})
        assert op.process(Batch(arrow=batch)).arrow.schema.field("k").type == pa.int16()
        strings = pa.RecordBatch.from_pydict({"k": ["a", None], "v": [1.0, 2.0]})
        out = operators_for(aggregate_op(), 1)[0].process(Batch(arrow=strings)).arrow
        assert out.schema.field("k").type == pa.string()

    def test_a_key_column_whose_type_changes_between_batches_still_groups_like_python(
            self) -> None:
        op = operators_for(aggregate_op(), 1)[0]
        latest: dict[Any, dict[str, Any]] = {}
        for keys in ([1, 2], [2.0, 2.5], [None, 1]):
            batch = pa.RecordBatch.from_pydict({"k": keys, "v": [1.0] * len(keys)})
            for row in op.process(Batch(arrow=batch)).rows:
                latest[row.pop("k")] = row
        assert {k: r["n"] for k, r in latest.items()} == {1: 2, 2: 2, 2.5: 1, None: 1}


def without_identities(batch: Batch) -> Batch:
    """The partial batch as a runtime before key identities wrote it."""
    arrow = batch.arrow
    return Batch(arrow=arrow.drop_columns([KEY_IDENTITY]), kind=batch.kind)


class TestKeyIdentities:
    """A combiner hashes its string keys once; the router and the operator use those
    hashes. They must give what hashing the keys gives, or keys would be misrouted."""

    IDENTIFIED = ["zipf strings", "strings and nulls", "binary"]

    @pytest.mark.parametrize("name", IDENTIFIED)
    def test_partial_rows_carry_identities_whose_key_groups_are_the_keys_own(
            self, name: str) -> None:
        combiner = Combiner(op=aggregate_op())
        for batch in batches(records_of(KEY_COLUMNS[name]), 500):
            combiner.add(batch)
        flushed = combiner.flush()
        assert flushed is not None and KEY_IDENTITY in flushed.arrow.schema.names
        groups = partial_key_groups(flushed, MAX_P)
        assert groups is not None
        keys = flushed.arrow.column("k")
        assert groups.tolist() == key_groups_of_array(keys, MAX_P).tolist()
        assert groups.tolist() == [key_group_of(k, MAX_P) for k in keys.to_pylist()]

    @pytest.mark.parametrize("keys", [pa.array(["b", "a", None]).dictionary_encode(),
                                      pa.array(["x", "y"], type=pa.large_string())],
                             ids=["dictionary", "large strings"])
    def test_keys_of_other_string_types_carry_identities_too(self, keys: pa.Array) -> None:
        combiner = Combiner(op=aggregate_op())
        combiner.add(Batch(arrow=pa.RecordBatch.from_arrays(
            [keys, pa.array([1.0] * len(keys))], names=["k", "v"])))
        flushed = combiner.flush()
        assert flushed is not None
        groups = partial_key_groups(flushed, MAX_P)
        assert groups is not None
        assert groups.tolist() == [key_group_of(k, MAX_P)
                                   for k in flushed.arrow.column("k").to_pylist()]

    @pytest.mark.parametrize("name", ["sparse 64-bit integers", "floats with NaN and "
                                      "signed zeros", "nulls only"])
    def test_keys_that_are_not_strings_carry_none(self, name: str) -> None:
        combiner = Combiner(op=aggregate_op())
        for batch in batches(records_of(KEY_COLUMNS[name]), 500):
            combiner.add(batch)
        flushed = combiner.flush()
        assert flushed is not None and KEY_IDENTITY not in flushed.arrow.schema.names

    @pytest.mark.parametrize("name", IDENTIFIED)
    def test_partial_rows_kept_as_rows_in_channel_state_fold_as_they_were_sent(
            self, name: str) -> None:
        """Unaligned checkpoints keep in-flight batches as rows; back in Arrow, the
        identities (half of them above 2**63 as unsigned numbers) must read the same."""
        records = records_of(KEY_COLUMNS[name])
        sent, kept = operators_for(aggregate_op(), 1)[0], operators_for(aggregate_op(), 1)[0]
        combiner = Combiner(op=aggregate_op())
        rows: list[list[dict[str, Any]]] = [[], []]
        for batch in batches(records, 300):
            combiner.add(batch)
            flushed = combiner.flush()
            assert flushed is not None
            groups = partial_key_groups(flushed, MAX_P)
            kept_rows = pickle.loads(pickle.dumps(flushed.rows))
            again = Batch(rows=kept_rows, kind=kind_of_columns(kept_rows[0]))
            assert partial_key_groups(again, MAX_P).tolist() == groups.tolist()  # type: ignore[union-attr]
            rows[0] += sent.process(flushed).rows
            rows[1] += kept.process(again).rows
        assert rows[0] == rows[1]

    @pytest.mark.parametrize("name", IDENTIFIED)
    def test_an_operator_reaches_the_same_state_with_or_without_the_identities(
            self, name: str) -> None:
        """Without them, as from channel state an older runtime wrote: hashed again."""
        records = records_of(KEY_COLUMNS[name])
        with_ids, without = operators_for(aggregate_op(), 1)[0], \
            operators_for(aggregate_op(), 1)[0]
        combiner = Combiner(op=aggregate_op())
        rows: list[list[dict[str, Any]]] = [[], []]
        for batch in batches(records, 300):
            combiner.add(batch)
            flushed = combiner.flush()
            assert flushed is not None
            rows[0] += with_ids.process(flushed).rows
            rows[1] += without.process(without_identities(flushed)).rows
        assert rows[0] == rows[1]
        for table in (with_ids.table, without.table):
            keys = table.key_values(np.arange(table.size))
            assert table.groups.tolist() == key_groups_of_array(keys, MAX_P).tolist()
        assert with_ids.table.key_values(np.arange(with_ids.table.size)).equals(
            without.table.key_values(np.arange(without.table.size)))


class TestRestore:
    @pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1)])
    @pytest.mark.parametrize("name", ["zipf strings", "strings and nulls",
                                      "floats with NaN and signed zeros", "binary"])
    def test_a_restore_at_another_parallelism_keeps_every_key_in_its_key_group(
            self, name: str, before: int, after: int) -> None:
        records = records_of(KEY_COLUMNS[name])
        half = len(records) // 2
        op = aggregate_op()
        first = operators_for(op, before)
        run(first, records[:half], combine=True)
        blobs = [o.snapshot().serialize() for o in first]

        second = operators_for(op, after)
        restored = sum(o.restore(blobs) for o in second)
        assert restored == len({_same(k) for k, _ in records[:half]})
        for o in second:
            table = o.table
            keys = table.key_values(np.arange(table.size))
            groups = key_groups_of_array(keys, MAX_P)
            assert groups.tolist() == table.groups.tolist()
            assert all(g in o.key_groups for g in groups.tolist())
            assert [key_group_of(k, MAX_P) for k in keys.to_pylist()] == groups.tolist()
        got = run(second, records[half:], combine=True)
        expected = reference(records)
        assert_same(got, {k: expected[k] for k in {_same(k) for k, _ in records[half:]}})

    def test_state_written_with_keys_as_python_objects_restores(self) -> None:
        """The first snapshot format kept the keys as a numpy array of objects."""
        records = records_of(KEY_COLUMNS["strings and nulls"])
        half = len(records) // 2
        expected_half = reference(records[:half])
        keys = list(expected_half)
        old = np.empty(len(keys), dtype=object)
        for i, key in enumerate(keys):
            old[i] = key
        payload = {
            "version": 1, "keys": old,
            "groups": np.array([key_group_of(k, MAX_P) for k in keys], dtype=np.int64),
            "accumulators": {
                "count": np.array([expected_half[k]["n"] for k in keys], dtype=np.int64),
                "sum:v": np.array([expected_half[k]["total"] for k in keys]),
                "min:v": np.array([expected_half[k]["low"] for k in keys]),
                "max:v": np.array([expected_half[k]["high"] for k in keys]),
            }}
        operators = operators_for(aggregate_op(), 2)
        assert sum(o.restore([pickle.dumps(payload)]) for o in operators) == len(keys)
        got = run(operators, records[half:], combine=True)
        expected = reference(records)
        assert_same(got, {k: expected[k] for k in {_same(k) for k, _ in records[half:]}})

    def test_state_of_an_unknown_version_is_refused(self) -> None:
        payload = {"version": 99, "keys": pa.array(["a"]), "groups": np.array([1]),
                   "accumulators": {}}
        with pytest.raises(ValueError, match="version 99"):
            operators_for(aggregate_op(), 1)[0].restore([pickle.dumps(payload)])


def window_op() -> Any:
    p = Pipeline()
    (p.source(sources.sequence(count=1),
              watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="1s"))
      .key_by("k")
      .window(windows.tumbling("10s"))
      .aggregate(n="count", total=("sum", "v"))
      .sink(sinks.discard()))
    keyed = plan_stages(p)[1].keyed
    assert keyed is not None
    return keyed


class TestWindows:
    @pytest.mark.parametrize("name", ["zipf strings", "strings and nulls", "binary",
                                      "sparse 64-bit integers"])
    def test_window_rows_per_key_equal_grouping_in_python(self, name: str) -> None:
        keys = KEY_COLUMNS[name]
        rng = random.Random(4)
        stamps = [rng.randrange(0, 40_000) for _ in keys]
        operator = build_keyed_operator(op=window_op(), subtask=0, max_parallelism=MAX_P,
                                        key_groups=range(MAX_P))
        for start in range(0, len(keys), 300):
            part = slice(start, start + 300)
            operator.process(Batch(arrow=pa.RecordBatch.from_pydict({
                "k": keys[part], "ts": stamps[part], "v": [1.0] * len(keys[part])})))
        fired = operator.on_watermark(10**12).rows
        got = {(_same(r["k"]), r["window_start"]): r["n"] for r in fired}
        expected: dict[tuple[Any, int], int] = {}
        for key, stamp in zip(keys, stamps, strict=True):
            window = (_same(key), stamp // 10_000 * 10_000)
            expected[window] = expected.get(window, 0) + 1
        assert got == expected


def composite_op() -> KeyedOp:
    p = Pipeline(args={})
    (p.source(sources.sequence(count=1)).key_by(["country", "user"])
     .aggregate(n="count", total=("sum", "v"))
     .sink(sinks.discard()))
    return p.keyed_ops[0]


def composite_records(count: int) -> list[dict[str, Any]]:
    rng = random.Random(11)
    countries = ["de", "fr", None, "日本"]
    return [{"country": rng.choice(countries),
             "user": None if i % 17 == 0 else rng.randrange(40),
             "v": float(i % 7)} for i in range(count)]


class TestCompositeKeys:
    @staticmethod
    def _run(operators: list[AggregateOperator], records: list[dict[str, Any]], *,
             combine: bool) -> dict[tuple[Any, Any], dict[str, Any]]:
        latest: dict[tuple[Any, Any], dict[str, Any]] = {}
        combiner = Combiner(op=operators[0].op, max_records=300, max_delay=1e9)
        key = ("country", "user")
        for start in range(0, len(records), 200):
            batch = Batch(arrow=pa.RecordBatch.from_pylist(records[start:start + 200]))
            if combine:
                combiner.add(batch)
                batch_or_none = combiner.flush() if len(combiner) >= 300 else None
            else:
                batch_or_none = batch
            for flushed in ([batch_or_none] if batch_or_none is not None else []):
                for target, part in split_by_target(flushed, key, parallelism=len(operators),
                                                    max_parallelism=MAX_P):
                    for row in operators[target].process(part).rows:
                        latest[(row.pop("country"), row.pop("user"))] = row
        last = combiner.flush()
        if last is not None:
            for target, part in split_by_target(last, key, parallelism=len(operators),
                                                max_parallelism=MAX_P):
                for row in operators[target].process(part).rows:
                    latest[(row.pop("country"), row.pop("user"))] = row
        return latest

    @staticmethod
    def _reference(records: list[dict[str, Any]]) -> dict[tuple[Any, Any], dict[str, Any]]:
        out: dict[tuple[Any, Any], dict[str, Any]] = {}
        for r in records:
            row = out.setdefault((r["country"], r["user"]), {"n": 0, "total": 0.0})
            row["n"] += 1
            row["total"] += r["v"]
        return out

    @pytest.mark.parametrize("combine", [True, False], ids=["combined", "records"])
    def test_aggregates_per_pair_of_columns_equal_grouping_by_tuples_in_python(
            self, combine: bool) -> None:
        records = composite_records(3000)
        got = self._run(operators_for(composite_op(), 2), records, combine=combine)
        assert_same(got, self._reference(records))

    def test_a_composite_key_hashes_like_the_tuple_a_key_function_would_return(
            self) -> None:
        records = composite_records(500)
        arrow = pa.RecordBatch.from_pylist(records)
        by_columns = key_groups_of_array(
            pa.StructArray.from_arrays([arrow.column("country"), arrow.column("user")],
                                       names=["country", "user"]), MAX_P)
        assert by_columns.tolist() == [key_group_of((r["country"], r["user"]), MAX_P)
                                       for r in records]

    def test_the_key_columns_come_out_in_their_own_types(self) -> None:
        op = operators_for(composite_op(), 1)[0]
        batch = pa.RecordBatch.from_pydict({"country": ["de", "de"],
                                            "user": pa.array([3, 3], type=pa.int32()),
                                            "v": [1.0, 2.0]})
        out = op.process(Batch(arrow=batch)).arrow
        assert out.schema.names == ["country", "user", "n", "total"]
        assert out.schema.field("user").type == pa.int32()
        assert out.to_pylist() == [{"country": "de", "user": 3, "n": 2, "total": 3.0}]

    @pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1)])
    def test_a_restore_at_another_parallelism_keeps_composite_keys_whole(
            self, before: int, after: int) -> None:
        records = composite_records(2000)
        half = len(records) // 2
        first = operators_for(composite_op(), before)
        self._run(first, records[:half], combine=True)
        blobs = [o.snapshot().serialize() for o in first]
        second = operators_for(composite_op(), after)
        assert sum(o.restore(blobs) for o in second) == len(self._reference(records[:half]))
        got = self._run(second, records[half:], combine=True)
        expected = self._reference(records)
        assert_same(got, {k: expected[k] for k in self._reference(records[half:])})

    def test_windows_per_composite_key_equal_grouping_in_python(self) -> None:
        p = Pipeline()
        (p.source(sources.sequence(count=1),
                  watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="1s"))
          .key_by(["country", "user"]).window(windows.tumbling("10s"))
          .aggregate(n="count").sink(sinks.discard()))
        keyed = plan_stages(p)[1].keyed
        assert keyed is not None
        operator = build_keyed_operator(op=keyed, subtask=0, max_parallelism=MAX_P,
                                        key_groups=range(MAX_P))
        records = composite_records(1500)
        rng = random.Random(3)
        for r in records:
            r["ts"] = rng.randrange(0, 30_000)
        for start in range(0, len(records), 250):
            operator.process(Batch(arrow=pa.RecordBatch.from_pylist(records[start:start + 250])))
        fired = operator.on_watermark(10**12).rows
        got = {(r["country"], r["user"], r["window_start"]): r["n"] for r in fired}
        expected: dict[tuple[Any, Any, int], int] = {}
        for r in records:
            window = (r["country"], r["user"], r["ts"] // 10_000 * 10_000)
            expected[window] = expected.get(window, 0) + 1
        assert got == expected

    def test_reduce_keyed_by_columns_keeps_a_result_per_tuple_of_their_values(self) -> None:
        p = Pipeline(args={})
        (p.source(sources.sequence(count=1)).key_by(["country", "user"])
         .reduce(lambda a, b: {**b, "v": a["v"] + b["v"]}).sink(sinks.discard()))
        op = p.keyed_ops[0]
        operators = [build_keyed_operator(op=op, subtask=i, max_parallelism=MAX_P,
                                          key_groups=key_group_range(i, parallelism=2,
                                                                     max_parallelism=MAX_P))
                     for i in range(2)]
        records = composite_records(800)
        latest: dict[tuple[Any, Any], float] = {}
        for start in range(0, len(records), 100):
            batch = Batch(arrow=pa.RecordBatch.from_pylist(records[start:start + 100]))
            for target, part in split_by_target(batch, ("country", "user"), parallelism=2,
                                                max_parallelism=MAX_P):
                for row in operators[target].process(part).rows:
                    latest[(row["country"], row["user"])] = row["v"]
        assert latest == pytest.approx({k: r["total"]
                                        for k, r in self._reference(records).items()})
