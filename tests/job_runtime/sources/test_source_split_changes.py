"""Sources whose set of splits changes: a subtask that holds no split of a never-ending
source waits for one instead of finishing; a Kafka checkpoint's positions continue
the partitions they name under whatever plan a restore makes; inputs never share
what they stage.

The Kafka tests here read a plan staged as the driver stages it and ask no broker
(a restore asks none either); the same cases against the real broker and Spark are
in ``kafka/test_kafka_source_changes.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from source_tasks import FakeSubtask, source_task

from job_runtime import Pipeline, sinks, sources
from job_runtime.errors import PipelineDefinitionError, UserCodeError
from job_runtime.records import Batch
from job_runtime.sources.kafka import (
    BEGINNING,
    KafkaPartition,
    KafkaSource,
    discovered_index,
)
from job_runtime.sources.kafka.plan import plan_bytes
from job_runtime.sources.source_contract import (
    RestoredSplit,
    Source,
    SourceContext,
    Split,
    SplitReader,
)
from job_runtime.sources.union import UNION_INDEX_BASE, UnionSource

WAIT = 10.0


class OneRecordThenIdle(SplitReader):
    """A split of a log: one record, then nothing new (never the end)."""

    def __init__(self, split: Split, *, ends: bool) -> None:
        self._split = split
        self._read = False
        self._ends = ends

    def read_batch(self) -> Batch | None:
        if not self._read:
            self._read = True
            return Batch(rows=[{"split": self._split.index}])
        if self._ends:
            return None
        time.sleep(0.01)
        return Batch(rows=[])

    def position(self) -> Any:
        return 1 if self._read else 0


class Growing(Source):
    """Split 0 from the start; split 1 once :attr:`grown` is set (a partition added)."""

    name = "growing"

    def __init__(self, *, unbounded: bool) -> None:
        self.grown = threading.Event()
        self._unbounded = unbounded

    @property
    def unbounded(self) -> bool:
        return self._unbounded

    @property
    def discovery_interval(self) -> float | None:
        return 0.02

    def splits(self, *, context: SourceContext) -> list[Split]:
        return [Split(index=0, description="first")]

    def discover(self, *, context: SourceContext, known: Any) -> list[Split]:
        return [Split(index=1, description="added")] if self.grown.is_set() else []

    def open(self, split: Split, position: Any, *, context: SourceContext) -> SplitReader:
        return OneRecordThenIdle(split, ends=not self._unbounded)


def eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


class TestASubtaskWithoutSplits:
    def test_of_an_unbounded_source_reads_the_split_it_gains_later(self) -> None:
        source = Growing(unbounded=True)
        subtask = FakeSubtask(subtask=1, parallelism=2)
        task, sink = source_task(source, subtask)
        task.start()
        try:
            time.sleep(0.3)  # several looks for splits, none of them ours
            assert subtask.finished_sources == 0, "a subtask of a never-ending source finished"
            assert not task.exhausted
            source.grown.set()
            eventually(lambda: sink.rows == [{"split": 1}],
                       f"the added split was never read: {sink.rows}, {subtask.failure}")
            assert subtask.finished_sources == 0
        finally:
            subtask.cancelled.set()
            task.join(WAIT)
        assert subtask.failure is None

    def test_of_a_bounded_source_finishes_at_once(self) -> None:
        subtask = FakeSubtask(subtask=1, parallelism=2)
        task, sink = source_task(Growing(unbounded=False), subtask)
        task.start()
        try:
            eventually(lambda: subtask.finished_sources == 1, "the subtask never finished")
            assert sink.rows == []
        finally:
            subtask.cancelled.set()
            task.join(WAIT)

    def test_with_a_split_of_an_unbounded_source_never_finishes_when_the_split_is_idle(
            self) -> None:
        subtask = FakeSubtask(subtask=0, parallelism=2)
        task, sink = source_task(Growing(unbounded=True), subtask)
        task.start()
        try:
            eventually(lambda: sink.rows == [{"split": 0}], "the split was never read")
            time.sleep(0.2)
            assert subtask.finished_sources == 0
        finally:
            subtask.cancelled.set()
            task.join(WAIT)

    def test_a_union_is_unbounded_while_any_input_is(self) -> None:
        bounded, unbounded = Growing(unbounded=False), Growing(unbounded=True)
        assert UnionSource([bounded, unbounded]).unbounded
        assert not UnionSource([bounded, Growing(unbounded=False)]).unbounded
        assert sources.kafka("t", "127.0.0.1:9").unbounded
        assert not sources.kafka("t", "127.0.0.1:9", bounded=True).unbounded


# --------------------------------------------------------------------------- Kafka plans

CLUSTER = "cluster-a"


def staged(tmp_path: Path, source: KafkaSource,
           partitions: list[tuple[str, int, int]], *, cluster: str | None = CLUSTER,
           end: int | None = None) -> SourceContext:
    """``source``'s plan staged as the driver stages it: (topic, partition, start)."""
    staging = str(tmp_path / "staging")
    plan = [KafkaPartition(topic=t, partition=n, start=start, end=end, cluster=cluster)
            for t, n, start in partitions]
    uri = source._plan_uri(staging)
    Path(uri).parent.mkdir(parents=True, exist_ok=True)
    Path(uri).write_bytes(plan_bytes(plan, bootstrap=source.bootstrap, topics=source.topics,
                                     start=source.start, bounded=source.bounded))
    return SourceContext(subtask=0, parallelism=2, staging_uri=staging)


def position(topic: str, partition: int, offset: int, *,
             cluster: str | None = CLUSTER) -> dict[str, Any]:
    found: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset,
                             "end": None}
    if cluster is not None:
        found["cluster"] = cluster
    return found


def restored(source: KafkaSource, context: SourceContext,
             positions: dict[int, Any]) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (index, the offset it continues from)."""
    found: dict[tuple[str, int], tuple[int, int]] = {}
    for item in source.restore_splits(source.splits(context=context), positions,
                                      context=context):
        part = item.split.description
        key = (part.topic, part.partition)
        assert key not in found, f"{key} is read twice"
        assert item.split.index not in {index for index, _ in found.values()}
        offset = part.start if item.position is None else item.position["offset"]
        found[key] = (item.split.index, offset)
    return found


class TestAKafkaRestoreUnderANewPlan:
    def test_continues_every_partition_the_checkpoint_knows_from_its_offset_once(
            self, tmp_path: Path) -> None:
        # The checkpoint: topic a's partitions 0 and 1 from the first plan, partition
        # 2 discovered while it ran.
        checkpoint = {0: position("a", 0, 10), 1: position("a", 1, 20),
                      discovered_index(0, 2): position("a", 2, 5)}
        # The new plan: topic b added before a, start changed; a gained partition 3.
        source = sources.kafka(["b", "a"], "127.0.0.1:9", start="latest")
        context = staged(tmp_path, source, [("b", 0, 700), ("a", 0, 99), ("a", 1, 99),
                                            ("a", 2, 99), ("a", 3, 99)])
        assert restored(source, context, checkpoint) == {
            ("b", 0): (0, 700),          # a topic new to the job: from the plan's start
            ("a", 0): (1, 10), ("a", 1): (2, 20), ("a", 2): (3, 5),
            ("a", 3): (4, BEGINNING),    # added to a known topic since: from its beginning
        }

    def test_rebuilds_a_partition_only_the_checkpoint_knows_under_its_topics_new_place(
            self, tmp_path: Path) -> None:
        source = sources.kafka(["b", "a"], "127.0.0.1:9")
        context = staged(tmp_path, source, [("b", 0, 0), ("a", 0, 0)])
        found = restored(source, context, {0: position("a", 0, 3),
                                           discovered_index(0, 1): position("a", 1, 8)})
        assert found == {("b", 0): (0, 0), ("a", 0): (1, 3),
                         ("a", 1): (discovered_index(1, 1), 8)}

    def test_drops_positions_of_a_topic_the_job_no_longer_reads(
            self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        source = sources.kafka(["a"], "127.0.0.1:9")
        context = staged(tmp_path, source, [("a", 0, 0)])
        found = restored(source, context, {0: position("gone", 0, 4), 1: position("a", 0, 6)})
        assert found == {("a", 0): (0, 6)}
        assert "gone/0" in caplog.text

    def test_continues_a_partition_held_under_two_indexes_once_from_the_farther_offset(
            self, tmp_path: Path) -> None:
        source = sources.kafka(["a"], "127.0.0.1:9")
        context = staged(tmp_path, source, [("a", 0, 0), ("a", 1, 0)])
        found = restored(source, context, {1: position("a", 1, 40),
                                           discovered_index(0, 1): position("a", 1, 55)})
        assert found == {("a", 0): (0, BEGINNING), ("a", 1): (1, 55)}

    def test_keeps_the_plans_index_for_a_partition_not_read_yet_in_an_older_checkpoint(
            self, tmp_path: Path) -> None:
        """Checkpoints written before positions named their partition hold ``None`` for
        a partition not read yet: it is the plan's split at that index."""
        source = sources.kafka(["a"], "127.0.0.1:9")
        context = staged(tmp_path, source, [("a", 0, 7), ("a", 1, 7)], cluster=None)
        found = restored(source, context, {0: None, 1: position("a", 1, 9, cluster=None)})
        assert found == {("a", 0): (0, 7), ("a", 1): (1, 9)}

    def test_refuses_a_position_at_another_cluster_in_one_line(self, tmp_path: Path) -> None:
        source = sources.kafka(["a"], "127.0.0.1:9")
        context = staged(tmp_path, source, [("a", 0, 0)], cluster="cluster-b")
        with pytest.raises(UserCodeError) as raised:
            restored(source, context, {0: position("a", 0, 5, cluster="cluster-a")})
        assert "cluster 'cluster-a'" in raised.value.details
        assert "\n" not in raised.value.details

    def test_refuses_a_position_that_is_not_a_partitions(self, tmp_path: Path) -> None:
        source = sources.kafka(["a"], "127.0.0.1:9")
        context = staged(tmp_path, source, [("a", 0, 0)])
        with pytest.raises(UserCodeError) as raised:
            restored(source, context, {0: 17})
        assert "not a Kafka partition's" in raised.value.details

    def test_a_partition_not_read_yet_is_checkpointed_as_what_it_is(
            self, tmp_path: Path) -> None:
        source = sources.kafka(["a"], "127.0.0.1:9")
        context = staged(tmp_path, source, [("a", 0, 12)])
        (split,) = source.splits(context=context)
        assert source.start_position(split) == position("a", 0, 12)

    def test_two_inputs_of_one_topic_at_two_clusters_are_planned_apart(
            self, tmp_path: Path) -> None:
        staging = str(tmp_path)
        first = sources.kafka("orders", "kafka-a:9092")
        second = sources.kafka("orders", "kafka-b:9092")
        assert first._plan_uri(staging) != second._plan_uri(staging)
        # The brokers' order in the list is no new cluster.
        assert sources.kafka("orders", "b:1,a:1")._plan_uri(staging) == \
            sources.kafka("orders", "a:1, b:1")._plan_uri(staging)


class TestAUnionRestore:
    def test_hands_each_input_the_positions_of_its_own_place(self, tmp_path: Path) -> None:
        kafka_input = sources.kafka(["b", "a"], "127.0.0.1:9")
        context = staged(tmp_path, kafka_input, [("b", 0, 0), ("a", 0, 0)])
        union = UnionSource([sources.sequence(count=10, splits=2), kafka_input])
        checkpoint = {0: 4, 1: 6, UNION_INDEX_BASE + 0: position("a", 0, 30)}
        found = union.restore_splits(union.splits(context=context), checkpoint,
                                     context=context)
        by_index = {item.split.index: item.position for item in found}
        assert by_index[0] == 4 and by_index[1] == 6
        assert by_index[UNION_INDEX_BASE + 0] is None  # b: new to the job
        assert by_index[UNION_INDEX_BASE + 1]["offset"] == 30  # a, renumbered by the plan
        assert all(isinstance(item, RestoredSplit) for item in found)


# --------------------------------------------------------------------------- staging


class TestStagedInputs:
    def test_two_dataframe_inputs_with_one_name_are_refused_naming_it(self) -> None:
        p = Pipeline()
        orders = p.source(sources.dataframe(lambda spark: spark.range(3)))
        refunds = p.source(sources.dataframe(lambda spark: spark.range(5)))
        orders.union(refunds).sink(sinks.discard())
        with pytest.raises(PipelineDefinitionError) as raised:
            p.validate()
        message = raised.value.describe()
        assert "two dataframe inputs are staged under the name 'dataframe'" in message
        assert "name=" in message and "\n" not in message

    def test_two_dataframe_inputs_with_their_own_names_are_read_apart(self) -> None:
        p = Pipeline()
        orders = p.source(sources.dataframe(lambda spark: spark.range(3), name="orders"))
        refunds = p.source(sources.dataframe(lambda spark: spark.range(5), name="refunds"))
        orders.union(refunds).sink(sinks.discard())
        p.validate()
