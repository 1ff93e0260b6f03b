"""``enrich``: every subtask keeps the whole table, read beside the task from its own
source, and enriches each record with its key's row; the table is snapshotted with
the operator, so a restore at any parallelism enriches from the checkpoint's table,
and a log's table continues from the checkpoint's positions, tombstones included."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence, Set
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from keyed_operators import Operators

from job_runtime import Pipeline, sinks, sources
from job_runtime.errors import PipelineDefinitionError, UserCodeError
from job_runtime.execution.stages import plan_stages, source_batch_size
from job_runtime.operators.keyed_operator import KeyedOperator
from job_runtime.pipeline import KeyedKind, KeyedOp
from job_runtime.records import Batch
from job_runtime.sources.source_contract import (
    RECORD_BATCH_SIZE,
    RestoredSplit,
    Source,
    SourceBacklog,
    SourceContext,
    Split,
    SplitReader,
)

Build = Callable[[Pipeline], Any]


def write_products(folder: Path, rows: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "products.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def enrich_op(build: Build) -> tuple[Pipeline, KeyedOp]:
    p = Pipeline()
    build(p).sink(sinks.discard())
    p.validate()
    keyed = plan_stages(p)[-1].keyed
    assert keyed is not None and keyed.kind is KeyedKind.ENRICH
    return p, keyed


def opened(operators: Operators, op: KeyedOp, tmp_path: Path, *, subtask: int = 0,
           parallelism: int = 1, blobs: Sequence[bytes] | None = None) -> KeyedOperator:
    operator = operators.make(op, subtask=subtask, parallelism=parallelism)
    if blobs is not None:
        operator.restore(blobs)
    operator.open(sources=SourceContext(subtask=0, parallelism=1,
                                        staging_uri=f"file://{tmp_path}/staging"),
                  cancelled=lambda: False)
    return operator


@pytest.fixture
def operators(tmp_path: Path) -> Operators:
    return Operators("hashmap", tmp_path)


@pytest.fixture
def products(tmp_path: Path) -> Path:
    folder = tmp_path / "products"
    write_products(folder, [{"sku": "a", "price": 1.5, "name": "apple"},
                            {"sku": "b", "price": 2.5, "name": "bread"}])
    return folder


def clicks(*rows: tuple[str, int]) -> Batch:
    return Batch(rows=[{"sku": sku, "user": user, "name": "click"} for sku, user in rows])


def by_user(batch: Batch) -> list[dict[str, Any]]:
    return sorted(batch.rows, key=lambda r: r["user"])


class TestTheDefaultEnrichment:
    def test_a_record_gets_its_rows_fields_and_keeps_its_own(
            self, operators: Operators, products: Path, tmp_path: Path) -> None:
        _, op = enrich_op(lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.files(str(products), format="jsonl"), key="sku"), on="sku"))
        operator = opened(operators, op, tmp_path)
        try:
            out = operator.process(clicks(("a", 1), ("b", 2), ("z", 3)))
        finally:
            operator.close()
        assert by_user(out) == [
            {"sku": "a", "user": 1, "name": "click", "price": 1.5},
            {"sku": "b", "user": 2, "name": "click", "price": 2.5},
            {"sku": "z", "user": 3, "name": "click", "price": None}]

    def test_an_inner_enrichment_drops_a_record_without_a_row(
            self, operators: Operators, products: Path, tmp_path: Path) -> None:
        _, op = enrich_op(lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.files(str(products), format="jsonl"), key="sku",
                    columns=["price"]), on="sku", how="inner"))
        operator = opened(operators, op, tmp_path)
        try:
            out = operator.process(clicks(("a", 1), ("z", 3)))
        finally:
            operator.close()
        assert out.rows == [{"sku": "a", "user": 1, "name": "click", "price": 1.5}]

    def test_the_table_key_may_be_named_otherwise_and_typed_otherwise(
            self, operators: Operators, tmp_path: Path) -> None:
        folder = tmp_path / "users"
        write_products(folder, [{"id": 1, "country": "fr"}, {"id": 2, "country": "de"}])
        _, op = enrich_op(lambda p: p.source(sources.sequence(1)).key_by("sku").enrich(
            p.table(sources.files(str(folder), format="jsonl"), key="id"), on="user"))
        operator = opened(operators, op, tmp_path)
        try:
            batch = Batch(arrow=pa.RecordBatch.from_pydict(
                {"user": pa.array([2, 1, 3], type=pa.int32()), "sku": ["x", "y", "z"]}))
            out = operator.process(batch)
        finally:
            operator.close()
        assert sorted((r["user"], r["country"]) for r in out.rows) == [
            (1, "fr"), (2, "de"), (3, None)]

    def test_records_without_the_column_fail_in_one_line_naming_it(
            self, operators: Operators, products: Path, tmp_path: Path) -> None:
        _, op = enrich_op(lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.files(str(products), format="jsonl"), key="sku"), on="sku"))
        operator = opened(operators, op, tmp_path)
        try:
            with pytest.raises(UserCodeError, match="the records have no column 'sku'"):
                operator.process(Batch(rows=[{"user": 1}]))
        finally:
            operator.close()

    def test_a_table_without_its_key_column_fails_naming_the_table(
            self, operators: Operators, products: Path, tmp_path: Path) -> None:
        _, op = enrich_op(lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.files(str(products), format="jsonl"), key="code",
                    name="catalogue"), on="sku"))
        operator = opened(operators, op, tmp_path)
        try:
            with pytest.raises(UserCodeError, match="table 'catalogue' is keyed by 'code'"):
                operator.process(clicks(("a", 1)))
        finally:
            operator.close()

    def test_reads_the_sources_large_batches(self, products: Path) -> None:
        p, _ = enrich_op(lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.files(str(products), format="jsonl"), key="sku"), on="sku"))
        assert source_batch_size(p) > RECORD_BATCH_SIZE


class TestAFunctionOfTheUsers:
    def test_is_called_with_the_row_or_none_and_may_drop_the_record(
            self, operators: Operators, products: Path, tmp_path: Path) -> None:
        def priced(click: dict[str, Any], row: dict[str, Any] | None) -> dict[str, Any] | None:
            if row is None:
                return None
            return {"user": click["user"], "cost": row["price"] * 2}

        p, op = enrich_op(lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.files(str(products), format="jsonl"), key="sku"), on="sku",
            fn=priced))
        assert source_batch_size(p) == RECORD_BATCH_SIZE
        operator = opened(operators, op, tmp_path)
        try:
            out = operator.process(clicks(("b", 1), ("z", 2), ("a", 3)))
        finally:
            operator.close()
        assert out.rows == [{"user": 1, "cost": 5.0}, {"user": 3, "cost": 3.0}]


def wait_for(condition: Callable[[], bool], *, what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


class TestABoundedTable:
    def test_is_read_again_on_its_schedule_each_reading_replacing_it(
            self, operators: Operators, products: Path, tmp_path: Path) -> None:
        _, op = enrich_op(lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.files(str(products), format="jsonl"), key="sku",
                    refresh=0.2), on="sku"))
        operator = opened(operators, op, tmp_path)
        try:
            assert operator.process(clicks(("b", 1))).rows[0]["price"] == 2.5
            write_products(products, [{"sku": "a", "price": 9.0, "name": "apple"}])

            def replaced() -> bool:
                out = operator.process(clicks(("a", 1), ("b", 2)))
                return by_user(out)[0]["price"] == 9.0

            wait_for(replaced, what="the table read again")
            assert by_user(operator.process(clicks(("b", 2))))[0]["price"] is None
        finally:
            operator.close()

    def test_restored_at_another_parallelism_is_the_checkpoints_not_the_files(
            self, operators: Operators, products: Path, tmp_path: Path) -> None:
        _, op = enrich_op(lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.files(str(products), format="jsonl"), key="sku"), on="sku"))
        first = [opened(operators, op, tmp_path, subtask=s, parallelism=2) for s in range(2)]
        try:
            for operator in first:
                operator.process(clicks(("a", 1)))
            blobs = [operators.checkpoint(operator) for operator in first]
        finally:
            for operator in first:
                operator.close()
        write_products(products, [{"sku": "a", "price": 100.0}])
        again = [opened(operators, op, tmp_path, subtask=s, parallelism=3,
                        blobs=[blobs[s * 2 // 3]]) for s in range(3)]
        try:
            prices = [operator.process(clicks(("a", 1), ("b", 2))).rows for operator in again]
        finally:
            for operator in again:
                operator.close()
        assert [sorted((r["sku"], r["price"]) for r in rows) for rows in prices] == [
            [("a", 1.5), ("b", 2.5)]] * 3

    def test_a_snapshot_keeps_the_table_of_its_barrier(
            self, operators: Operators, products: Path, tmp_path: Path) -> None:
        _, op = enrich_op(lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.files(str(products), format="jsonl"), key="sku",
                    refresh=0.1), on="sku"))
        operator = opened(operators, op, tmp_path)
        try:
            operator.process(clicks(("a", 1)))
            snapshot = operator.snapshot()
            write_products(products, [{"sku": "a", "price": 7.0}])
            wait_for(lambda: operator.process(clicks(("a", 1))).rows[0]["price"] == 7.0,
                     what="the table read again")
            restored = operators.make(op)
            restored.restore([snapshot.serialize()])
        finally:
            operator.close()
        assert restored.key_count() == 2


class LogSplit(SplitReader):
    """One partition of a log that never ends: the given batches, then nothing."""

    def __init__(self, batches: list[list[dict[str, Any]]], position: int) -> None:
        self.batches = batches
        self.next = position

    def read_batch(self) -> Batch | None:
        if self.next >= len(self.batches):
            time.sleep(0.01)
            return Batch(rows=[])
        rows = self.batches[self.next]
        self.next += 1
        return Batch(rows=rows)

    def position(self) -> int:
        return self.next

    def backlog(self) -> SourceBacklog:
        return SourceBacklog(topic="log", partition=0,
                             records=len(self.batches) - self.next)


class LogSource(Source):
    """A stand-in for a compacted topic's one partition (the real broker's test is the
    Kafka tier's): batches of records with a message key, a tombstone a record whose
    value fields are all missing."""

    name = "log"
    metadata_columns = ("key", "offset")

    def __init__(self, batches: list[list[dict[str, Any]]]) -> None:
        self.batches = batches
        self.opened_at: list[int] = []

    @property
    def unbounded(self) -> bool:
        return True

    def splits(self, *, context: SourceContext) -> list[Split]:
        return [Split(index=0, description="log-0")]

    def open(self, split: Split, position: Any, *, context: SourceContext) -> SplitReader:
        self.opened_at.append(int(position or 0))
        return LogSplit(self.batches, int(position or 0))

    def restore_splits(self, splits: Sequence[Split], positions: Mapping[int, Any], *,
                       context: SourceContext) -> list[RestoredSplit]:
        return [RestoredSplit(split=s, position=positions.get(s.index)) for s in splits]


class GrowingLog(LogSource):
    """A log that gains partitions while it is read, as a topic does: the first is
    listed at the start, the others only found by :meth:`discover`."""

    def __init__(self, partitions: list[list[list[dict[str, Any]]]]) -> None:
        super().__init__(partitions[0])
        self.partitions = partitions
        self.opened: list[tuple[int, int]] = []

    @property
    def discovery_interval(self) -> float | None:
        return 0.05

    def discover(self, *, context: SourceContext, known: Set[int]) -> list[Split]:
        return [Split(index=i, description=f"log-{i}") for i in range(1, len(self.partitions))
                if i not in known]

    def open(self, split: Split, position: Any, *, context: SourceContext) -> SplitReader:
        self.opened.append((split.index, int(position or 0)))
        return LogSplit(self.partitions[split.index], int(position or 0))

    def restore_splits(self, splits: Sequence[Split], positions: Mapping[int, Any], *,
                       context: SourceContext) -> list[RestoredSplit]:
        return [RestoredSplit(split=Split(index=i, description=f"log-{i}"), position=position)
                for i, position in sorted(positions.items())]


def message(key: bytes, sku: str | None, price: float | None) -> dict[str, Any]:
    return {"key": key, "offset": 0, "sku": sku, "price": price}


def prices_of(operator: KeyedOperator, *skus: str) -> dict[str, Any]:
    out = operator.process(Batch(rows=[{"sku": sku, "user": i} for i, sku in enumerate(skus)]))
    return {r["sku"]: r.get("price") for r in out.rows}


class TestATableThatFollowsALog:
    def test_each_record_replaces_its_row_and_a_tombstone_removes_it(
            self, operators: Operators, tmp_path: Path) -> None:
        log = LogSource([[message(b"a", "a", 1.0), message(b"b", "b", 2.0)],
                         [message(b"a", "a", 3.0)],
                         [message(b"b", None, None)]])
        _, op = enrich_op(lambda p: p.source(sources.sequence(1)).enrich(
            p.table(log, key="sku"), on="sku"))
        operator = opened(operators, op, tmp_path)
        try:
            out = operator.process(clicks(("a", 1), ("b", 2)))
        finally:
            operator.close()
        # The first reading is the log's backlog when the table was opened: all of it.
        assert [(r["sku"], r["price"]) for r in by_user(out)] == [("a", 3.0), ("b", None)]
        assert all("offset" not in r for r in out.rows)

    def test_a_batch_of_tombstones_alone_removes_the_rows_their_keys_wrote(
            self, operators: Operators, tmp_path: Path) -> None:
        log = LogSource([[message(b"a", "a", 1.0), message(b"b", "b", 2.0)],
                         [{"key": b"a", "offset": 7}]])   # no value: no value's fields
        _, op = enrich_op(lambda p: p.source(sources.sequence(1)).enrich(
            p.table(log, key="sku"), on="sku"))
        operator = opened(operators, op, tmp_path)
        try:
            out = operator.process(clicks(("a", 1), ("b", 2)))
        finally:
            operator.close()
        assert [(r["sku"], r["price"]) for r in by_user(out)] == [("a", None), ("b", 2.0)]

    def test_a_restore_continues_from_the_checkpoints_position(
            self, operators: Operators, tmp_path: Path) -> None:
        batches = [[message(b"a", "a", 1.0)], [message(b"b", "b", 2.0)]]
        log = LogSource(batches)
        _, op = enrich_op(lambda p: p.source(sources.sequence(1)).enrich(
            p.table(log, key="sku"), on="sku"))
        operator = opened(operators, op, tmp_path)
        try:
            operator.process(clicks(("a", 1)))
            blob = operators.checkpoint(operator)
        finally:
            operator.close()
        batches.append([message(b"a", None, None), message(b"c", "c", 4.0)])
        again = opened(operators, op, tmp_path, blobs=[blob])
        try:
            wait_for(lambda: [r["price"] for r in by_user(
                again.process(clicks(("c", 1))))] == [4.0], what="the log's new record")
            out = again.process(clicks(("a", 1), ("b", 2)))
        finally:
            again.close()
        assert log.opened_at == [0, 2]
        assert [(r["sku"], r["price"]) for r in by_user(out)] == [("a", None), ("b", 2.0)]


    def test_a_partition_the_log_gains_is_found_and_read_from_its_start(
            self, operators: Operators, tmp_path: Path) -> None:
        log = GrowingLog([[[message(b"a", "a", 1.0)]]])
        _, op = enrich_op(lambda p: p.source(sources.sequence(1)).enrich(
            p.table(log, key="sku"), on="sku"))
        operator = opened(operators, op, tmp_path)
        try:
            assert prices_of(operator, "a", "c") == {"a": 1.0, "c": None}
            log.partitions.append([[message(b"c", "c", 4.0)], [message(b"a", "a", 2.0)]])
            wait_for(lambda: prices_of(operator, "a", "c") == {"a": 2.0, "c": 4.0},
                     what="the rows of the partition the log gained")
            blob = operators.checkpoint(operator)
        finally:
            operator.close()
        log.partitions[1].append([message(b"c", "c", 5.0)])
        log.opened.clear()
        again = opened(operators, op, tmp_path, blobs=[blob])
        try:
            wait_for(lambda: prices_of(again, "c") == {"c": 5.0}, what="the later row")
        finally:
            again.close()
        # Restored, the gained partition goes on from the checkpoint's position.
        assert log.opened == [(0, 1), (1, 2)]


class TestThePipelineRefuses:
    @pytest.mark.parametrize(("build", "problem"), [
        (lambda p: p.source(sources.sequence(1)).enrich("products", on="sku"),
         "enrich() needs a table from p.table"),
        (lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.sequence(1), key="seq"), on=""), "enrich(on=...) needs"),
        (lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.sequence(1), key="seq"), on="seq", how="outer"),
         "enrich(how=...) must be one of left, inner"),
        (lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.sequence(1), key="seq"), on="seq", fn=lambda r, t: r,
            how="inner"), "enrich(how=...) is for the default enrichment"),
        (lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.sequence(1), key=""), on="seq"), "p.table(key=...) needs"),
        (lambda p: p.source(sources.sequence(1)).enrich(
            p.table(LogSource([]), key="sku", refresh="1m"), on="sku"),
         "p.table(refresh=...) re-reads a bounded source"),
        (lambda p: p.source(sources.sequence(1)).enrich(
            p.table(sources.sequence(1), key="seq", refresh=0), on="seq"),
         "must be positive"),
        (lambda p: p.source(sources.sequence(1)).enrich(
            Pipeline().table(sources.sequence(1), key="seq"), on="seq"),
         "a table of this pipeline"),
    ])
    def test_a_mistake_in_one_line(self, build: Build, problem: str) -> None:
        p = Pipeline()
        with pytest.raises(PipelineDefinitionError, match=problem.replace("(", r"\(")
                           .replace(")", r"\)").replace(".", r"\.")):
            build(p)

    def test_a_table_no_stream_reads(self) -> None:
        p = Pipeline()
        p.table(sources.sequence(1), key="seq", name="unused")
        p.source(sources.sequence(1)).sink(sinks.discard())
        with pytest.raises(PipelineDefinitionError, match="the table 'unused' is never read"):
            p.validate()

    def test_two_tables_of_one_name(self) -> None:
        p = Pipeline()
        p.table(sources.sequence(1), key="seq", name="t")
        with pytest.raises(PipelineDefinitionError, match="two tables are named 't'"):
            p.table(sources.sequence(1), key="seq", name="t")
