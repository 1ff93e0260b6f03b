"""Keyed state: copy-on-write snapshots, key groups, and restore with another parallelism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pytest
from paths import REPO

from job_runtime.operators.keyed import build_keyed_operator
from job_runtime.pipeline import KeyedOp, Pipeline
from job_runtime.records import (
    Batch,
    key_group_of,
    key_group_range,
    key_groups_of_array,
    operator_index_for_key_group,
)
from job_runtime.sinks import discard
from job_runtime.sources import sequence
from job_runtime.state.hashmap import HashMapStateBackend, deserialize_keyed_state

MAX_P = 128

SAMPLE_KEYS: list[Any] = [
    0, 1, 2, 41, -7, 2**40, 2**63 - 1, "a", "user-17", "", "żółw", b"bytes", 1.5, 3.0, -0.25,
    True, None, ("a", 1), (1, (2, "x")),
]


def owner_backend(backends: list[HashMapStateBackend], key_group: int) -> HashMapStateBackend:
    return next(b for b in backends if key_group in b.key_groups)


def backends_for(parallelism: int) -> list[HashMapStateBackend]:
    return [HashMapStateBackend(key_groups=key_group_range(i, parallelism=parallelism,
                                                           max_parallelism=MAX_P))
            for i in range(parallelism)]


# --------------------------------------------------------------------------- key groups


class TestKeyGroups:
    @pytest.mark.parametrize("parallelism", [1, 2, 3, 7, 128])
    def test_every_key_group_belongs_to_exactly_one_subtask(self, parallelism: int) -> None:
        owners: dict[int, int] = {}
        for subtask in range(parallelism):
            for group in key_group_range(subtask, parallelism=parallelism,
                                         max_parallelism=MAX_P):
                assert group not in owners
                owners[group] = subtask
        assert sorted(owners) == list(range(MAX_P))
        for group, subtask in owners.items():
            assert operator_index_for_key_group(group, parallelism=parallelism,
                                                max_parallelism=MAX_P) == subtask

    def test_the_vectorised_key_groups_equal_the_per_key_ones(self) -> None:
        ints = [*range(-500, 500), 2**40, 2**62]
        column = pa.array(ints, type=pa.int64())
        assert key_groups_of_array(column, MAX_P).tolist() == [key_group_of(k, MAX_P)
                                                               for k in ints]
        strings = [f"k{i}" for i in range(300)]
        assert key_groups_of_array(pa.array(strings), MAX_P).tolist() == [
            key_group_of(k, MAX_P) for k in strings]

    def test_keys_spread_over_the_key_groups(self) -> None:
        groups = {key_group_of(k, MAX_P) for k in range(10_000)}
        assert len(groups) == MAX_P
        groups = {key_group_of(f"user-{k}", MAX_P) for k in range(10_000)}
        assert len(groups) == MAX_P

    def test_key_groups_are_the_same_in_another_process(self) -> None:
        """Python salts ``hash(str)`` per process; key groups must not depend on it."""
        here = [key_group_of(k, MAX_P) for k in SAMPLE_KEYS]
        script = (
            "import json, sys\n"
            "from job_runtime.records import key_group_of\n"
            f"keys = {SAMPLE_KEYS!r}\n"
            f"print(json.dumps([key_group_of(k, {MAX_P}) for k in keys]))\n"
        )
        for seed in ("1", "12345"):
            env = {**os.environ, "PYTHONHASHSEED": seed,
                   "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
            out = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                                 capture_output=True, text=True, timeout=120)
            assert json.loads(out.stdout) == here


# --------------------------------------------------------------------------- hashmap backend


class TestHashMapSnapshots:
    def test_a_snapshot_is_unaffected_by_later_writes(self) -> None:
        backend = HashMapStateBackend(key_groups=range(0, MAX_P))
        for key in range(100):
            backend.put("sum", key_group_of(key, MAX_P), key, key * 10)
        snapshot = backend.snapshot()

        # Overwrite, delete and add after the snapshot, in the same key groups.
        for key in range(100):
            group = key_group_of(key, MAX_P)
            if key % 3 == 0:
                backend.delete("sum", group, key)
            else:
                backend.put("sum", group, key, -1)
            backend.put("sum", key_group_of(key + 1000, MAX_P), key + 1000, 0)
        backend.put("other", 5, "x", "y")

        restored = deserialize_keyed_state(snapshot.serialize())
        values = {k: v for tables in restored.values() for k, v in tables["sum"].items()}
        assert values == {key: key * 10 for key in range(100)}
        assert all("other" not in tables for tables in restored.values())
        assert snapshot.key_count() == 100

        # The live state has every change.
        assert backend.get("sum", key_group_of(1, MAX_P), 1) == -1
        assert backend.get("sum", key_group_of(3, MAX_P), 3) is None
        assert backend.get("sum", key_group_of(1001, MAX_P), 1001) == 0

    def test_two_snapshots_each_keep_their_own_view(self) -> None:
        backend = HashMapStateBackend(key_groups=range(0, MAX_P))
        group = key_group_of("k", MAX_P)
        backend.put("v", group, "k", 1)
        first = backend.snapshot()
        backend.put("v", group, "k", 2)
        second = backend.snapshot()
        backend.put("v", group, "k", 3)

        def value(snapshot: Any) -> Any:
            return deserialize_keyed_state(snapshot.serialize())[group]["v"]["k"]

        assert (value(first), value(second), backend.get("v", group, "k")) == (1, 2, 3)

    @pytest.mark.parametrize(("before", "after"), [(3, 2), (2, 3), (4, 1), (1, 4)])
    def test_restore_with_another_parallelism_gives_each_key_to_exactly_one_subtask(
            self, before: int, after: int) -> None:
        keys = list(range(2000)) + [f"user-{i}" for i in range(500)]
        old = backends_for(before)
        for key in keys:
            group = key_group_of(key, MAX_P)
            owner_backend(old, group).put("count", group, key, {"key": key, "n": 1})
        blobs = [b.snapshot().serialize() for b in old]

        new = backends_for(after)
        restored = [b.restore(blobs) for b in new]
        assert sum(restored) == len(keys)
        holders: dict[Any, list[int]] = {}
        for subtask, backend in enumerate(new):
            for group, key, value in backend.iter_entries("count"):
                assert group in backend.key_groups
                assert group == key_group_of(key, MAX_P)
                assert value == {"key": key, "n": 1}
                holders.setdefault(key, []).append(subtask)
        assert holders == {
            key: [operator_index_for_key_group(key_group_of(key, MAX_P), parallelism=after,
                                               max_parallelism=MAX_P)] for key in keys}

    def test_restored_state_can_be_written_without_touching_the_snapshot(self) -> None:
        original = HashMapStateBackend(key_groups=range(0, MAX_P))
        original.put("v", 1, "a", 1)
        blob = original.snapshot().serialize()
        restored = HashMapStateBackend(key_groups=range(0, MAX_P))
        restored.restore([blob])
        snapshot = restored.snapshot()
        restored.put("v", 1, "a", 2)
        assert deserialize_keyed_state(snapshot.serialize())[1]["v"]["a"] == 1

    def test_an_unknown_state_file_is_refused(self) -> None:
        backend = HashMapStateBackend(key_groups=range(0, MAX_P))
        with pytest.raises(ValueError, match="known version"):
            backend.restore([b"\x80\x05N."])  # a pickled None


# --------------------------------------------------------------------------- operators


def keyed_op(build: Any) -> KeyedOp:
    """The keyed operator a small pipeline describes, as the runtime would plan it."""
    p = Pipeline(args={})
    build(p.source(sequence(count=1))).sink(discard())
    ops = p.keyed_ops
    assert len(ops) == 1
    return ops[0]


def aggregate_op() -> KeyedOp:
    return keyed_op(lambda s: s.key_by("k").aggregate(
        n="count", total=("sum", "v"), low=("min", "v"), high=("max", "v"), avg=("mean", "v")))


def batches(records: list[tuple[Any, float]], size: int) -> Iterable[Batch]:
    for start in range(0, len(records), size):
        chunk = records[start:start + size]
        yield Batch(arrow=pa.RecordBatch.from_pydict({"k": [k for k, _ in chunk],
                                                      "v": [v for _, v in chunk]}))


def row_batches(records: list[tuple[Any, float]], size: int) -> Iterable[Batch]:
    for start in range(0, len(records), size):
        yield Batch(rows=[{"k": k, "v": v} for k, v in records[start:start + size]])


def latest_per_key(outputs: Iterable[Batch], key: str = "k") -> dict[Any, dict[str, Any]]:
    latest: dict[Any, dict[str, Any]] = {}
    for batch in outputs:
        for row in batch.rows:
            latest[row[key]] = row
    return latest


def operators_for(op: KeyedOp, parallelism: int) -> list[Any]:
    return [build_keyed_operator(op=op, subtask=i, max_parallelism=MAX_P,
                                 key_groups=key_group_range(i, parallelism=parallelism,
                                                            max_parallelism=MAX_P))
            for i in range(parallelism)]


def route(operators: list[Any], batch: Batch, key: str = "k") -> list[Batch]:
    """Send each record to the operator owning its key group, as the exchange does."""
    out = []
    for op in operators:
        mine = [r for r in batch.rows
                if key_group_of(r[key], MAX_P) in op.key_groups]
        if mine:
            part = Batch(arrow=pa.RecordBatch.from_pylist(mine)) if batch.has_arrow else \
                Batch(rows=mine)
            out.append(op.process(part))
    return out


class TestKeyedOperators:
    RECORDS = [(f"k{i % 23}" if i % 2 else i % 17, float(i % 11) - 3.0) for i in range(600)]

    @pytest.mark.parametrize(("before", "after"), [(1, 1), (2, 3), (3, 1)])
    def test_aggregate_state_survives_a_snapshot_and_restore(self, before: int,
                                                            after: int) -> None:
        records = [(str(k), v) for k, v in self.RECORDS]
        op = aggregate_op()
        reference = operators_for(op, 1)[0]
        expected = latest_per_key(reference.process(b) for b in batches(records, 50))

        half = len(records) // 2
        first = operators_for(op, before)
        for batch in batches(records[:half], 40):
            route(first, batch)
        blobs = [o.snapshot().serialize() for o in first]
        # Records after the snapshot are lost with the failed subtasks.
        for batch in batches(records[half:half + 60], 40):
            route(first, batch)

        second = operators_for(op, after)
        assert sum(o.restore(blobs) for o in second) == len({k for k, _ in records[:half]})
        outputs: list[Batch] = []
        for batch in batches(records[half:], 40):
            outputs.extend(route(second, batch))
        got = latest_per_key(outputs)
        # Every key seen after the restore reports the same aggregates as an
        # operator that never failed.
        touched = {k for k, _ in records[half:]}
        assert set(got) == touched
        for key in touched:
            assert got[key] == pytest.approx(expected[key]), key

    def test_an_aggregate_snapshot_is_unaffected_by_later_batches(self) -> None:
        op = aggregate_op()
        operator = operators_for(op, 1)[0]
        operator.process(next(iter(batches([("a", 1.0), ("b", 2.0)], 10))))
        snapshot = operator.snapshot()
        operator.process(next(iter(batches([("a", 5.0), ("c", 1.0)], 10))))
        blob = snapshot.serialize()
        fresh = operators_for(op, 1)[0]
        assert fresh.restore([blob]) == 2
        out = fresh.process(next(iter(batches([("a", 0.0)], 10)))).rows
        assert out == [{"k": "a", "n": 2, "total": 1.0, "low": 0.0, "high": 1.0, "avg": 0.5}]

    def test_reduce_state_survives_a_snapshot_and_restore_with_another_parallelism(
            self) -> None:
        op = keyed_op(lambda s: s.key_by("k").reduce(
            lambda a, b: {"k": a["k"], "v": a["v"] + b["v"]}))
        records = self.RECORDS  # int and str keys mixed: rows, not Arrow
        first = operators_for(op, 2)
        for batch in row_batches(records[:300], 25):
            route(first, batch)
        blobs = [o.snapshot().serialize() for o in first]
        second = operators_for(op, 3)
        for o in second:
            o.restore(blobs)
        outputs: list[Batch] = []
        for batch in row_batches(records[300:], 25):
            outputs.extend(route(second, batch))
        got = {k: r["v"] for k, r in latest_per_key(outputs).items()}
        expected: dict[Any, float] = {}
        for key, value in records:
            expected[key] = expected.get(key, 0.0) + value
        assert got == {k: expected[k] for k in {k for k, _ in records[300:]}}

    def test_process_functions_keep_value_and_map_state_per_key(self) -> None:
        def count_words(record: dict[str, Any], ctx: Any) -> list[dict[str, Any]]:
            seen = ctx.value_state("seen")
            words = ctx.map_state("words")
            seen.update(seen.value(0) + 1)
            words.put(record["w"], words.get(record["w"], 0) + 1)
            return [{"k": ctx.key, "seen": seen.value(), "distinct": len(list(words.keys()))}]

        op = keyed_op(lambda s: s.key_by("k").process(count_words))
        operator = operators_for(op, 1)[0]
        rows = [{"k": "a", "w": "x"}, {"k": "b", "w": "x"}, {"k": "a", "w": "y"},
                {"k": "a", "w": "x"}]
        out = operator.process(Batch(rows=rows[:2])).rows
        blob = operator.snapshot().serialize()
        out += operator.process(Batch(rows=rows[2:])).rows
        assert out[-1] == {"k": "a", "seen": 3, "distinct": 2}

        restored = operators_for(op, 1)[0]
        restored.restore([blob])
        again = restored.process(Batch(rows=rows[2:])).rows
        assert again == out[2:]
