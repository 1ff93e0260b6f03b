"""``sources.kafka`` against the real broker, without Spark: its splits, what its readers
read, where they continue after a restore, where a bounded source ends, and its
errors. Each test calls the source as a subtask and the driver do: ``splits``,
``open``, ``read_batch``, ``position`` and ``prepare_on_driver``.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions

from cjob_checkpoint.store.memory import InMemoryCheckpointStore
from e2e.kafka import KafkaBroker, create_topic, transactional_producer
from e2e.kafka.clients import read_topic
from job_runtime import sources
from job_runtime.errors import ConfigurationError, UserCodeError
from job_runtime.records import Batch
from job_runtime.sources.kafka import KafkaSource
from job_runtime.sources.source_contract import SourceContext, Split, SplitReader
from job_runtime.sources.staging import DriverStaging

READ_TIMEOUT = 30.0


def produce(bootstrap: str, topic: str, values: list[bytes], *, partition: int = 0,
            headers: list[tuple[str, bytes]] | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=b"k%d" % i, partition=partition,
                         headers=headers)
    assert producer.flush(30) == 0


def context(tmp_path: Path, *, subtask: int = 0, parallelism: int = 1,
            batch_size: int = 8192) -> SourceContext:
    return SourceContext(subtask=subtask, parallelism=parallelism,
                         staging_uri=str(tmp_path / "staging"), batch_size=batch_size)


def driver_staging(tmp_path: Path) -> DriverStaging:
    """The staging area as a driver of attempt 1 prepares its source in."""
    return DriverStaging(uri=str(tmp_path / "staging"), attempt=1,
                         store=InMemoryCheckpointStore(attempt=1))


def identity(splits: list[Split]) -> list[tuple[int, str, int]]:
    return [(s.index, s.description.topic, s.description.partition) for s in splits]


def read_to_end(reader: SplitReader) -> list[dict[str, Any]]:
    """Every row of a bounded reader, until it reports its end."""
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + READ_TIMEOUT
    while (batch := reader.read_batch()) is not None:
        rows.extend(batch.rows)
        assert time.monotonic() < deadline, f"no end after {len(rows)} rows"
    return rows


def read_at_least(reader: SplitReader, count: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + READ_TIMEOUT
    while len(rows) < count:
        batch = reader.read_batch()
        assert batch is not None, "an unbounded reader ended"
        rows.extend(batch.rows)
        assert time.monotonic() < deadline, f"only {len(rows)} of {count} rows arrived"
    return rows


def first_records(reader: SplitReader) -> Batch:
    """The first batch with records (a busy machine may return an empty one first)."""
    deadline = time.monotonic() + READ_TIMEOUT
    while time.monotonic() < deadline:
        batch = reader.read_batch()
        assert batch is not None, "the reader ended before any record"
        if len(batch):
            return batch
    raise AssertionError("no record arrived")


def only_split(source: KafkaSource, ctx: SourceContext) -> Split:
    splits = source.splits(context=ctx)
    assert len(splits) == 1
    return splits[0]


def test_the_splits_are_the_partitions_in_the_order_of_the_topics_then_by_partition_in_every_process(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    first = create_topic(bootstrap=bootstrap, partitions=2)
    second = create_topic(bootstrap=bootstrap, partitions=3)
    expected = [(0, second, 0), (1, second, 1), (2, second, 2), (3, first, 0), (4, first, 1)]

    # Without a staged plan (a subtask that finds none asks the brokers itself).
    assert identity(sources.kafka([second, first], bootstrap).splits(
        context=context(tmp_path / "unstaged"))) == expected

    driver = sources.kafka([second, first], bootstrap)
    driver.prepare_on_driver(spark_context=None, staging=driver_staging(tmp_path))
    staged = list((tmp_path / "staging" / "kafka").glob("plan-*.json"))
    assert len(staged) == 1

    # A partition added later is not read: every process keeps the first start's plan.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(first, 3)])[first].result(timeout=30)
    for subtask in (0, 1):
        ctx = context(tmp_path, subtask=subtask, parallelism=2)
        assert identity(sources.kafka([second, first], bootstrap).splits(context=ctx)) == expected
    # A later attempt's driver leaves the plan as it was.
    sources.kafka([second, first], bootstrap).prepare_on_driver(
        spark_context=None, staging=driver_staging(tmp_path))
    assert json.loads(staged[0].read_text())["partitions"][3:] == [
        {"topic": first, "partition": 0, "start": 0, "end": None},
        {"topic": first, "partition": 1, "start": 0, "end": None},
    ]


def test_a_reader_reads_every_committed_record_and_none_of_an_aborted_transaction(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=1)
    producer = transactional_producer(bootstrap=bootstrap, transactional_id=f"tx-{uuid.uuid4()}")

    def transaction(values: list[bytes], *, commit: bool) -> None:
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value, partition=0)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # the records reach the log before the abort
            producer.abort_transaction(30)

    transaction([b"c1", b"c2"], commit=True)
    transaction([b"a1", b"a2"], commit=False)
    transaction([b"c3"], commit=True)
    # The log ends with an aborted transaction and its marker: nothing to deliver
    # there, and a bounded reader must still see its end.
    transaction([b"a3"], commit=False)

    ctx = context(tmp_path)
    bounded = sources.kafka(topic, bootstrap, bounded=True)
    split = only_split(bounded, ctx)
    reader = bounded.open(split, None, context=ctx)
    rows = read_to_end(reader)
    assert [r["value"] for r in rows] == [b"c1", b"c2", b"c3"]
    assert reader.position()["offset"] == split.description.end
    reader.close()

    unbounded = sources.kafka(topic, bootstrap)
    reader = unbounded.open(only_split(unbounded, ctx), None, context=ctx)
    rows = read_at_least(reader, 3)
    deadline = time.monotonic() + READ_TIMEOUT
    while reader.position()["offset"] < split.description.end and time.monotonic() < deadline:
        batch = reader.read_batch()
        assert batch is not None
        rows.extend(batch.rows)
    assert [r["value"] for r in rows] == [b"c1", b"c2", b"c3"]
    # Past the trailing aborted transaction: a restore would not scan it again.
    assert reader.position()["offset"] == split.description.end
    reader.close()


def test_partitions_added_later_are_discovered_under_the_same_indexes_in_every_process(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    first = create_topic(bootstrap=bootstrap, partitions=1)
    second = create_topic(bootstrap=bootstrap, partitions=2)
    produce(bootstrap, first, [b"old"])
    source = sources.kafka([first, second], bootstrap)
    source.prepare_on_driver(spark_context=None, staging=driver_staging(tmp_path))
    planned = source.splits(context=context(tmp_path))
    assert source.discover(context=context(tmp_path), known=frozenset()) == []

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(first, 3)])[first].result(timeout=30)
    admin.create_partitions([NewPartitions(second, 3)])[second].result(timeout=30)
    produce(bootstrap, first, [b"a", b"b"], partition=2)

    found = [sorted((s.index, s.description.topic, s.description.partition,
                      s.description.start) for s in sources.kafka([first, second], bootstrap)
                     .discover(context=context(tmp_path, subtask=subtask, parallelism=2),
                               known=frozenset()))
             for subtask in (0, 1)]
    assert found[0] == found[1] == [
        (1_000_001, first, 1, 0), (1_000_002, first, 2, 0), (2_000_002, second, 2, 0)]
    assert {s.index for s in planned}.isdisjoint(index for index, *_ in found[0])
    # What a subtask already knows is not found again.
    again = source.discover(context=context(tmp_path), known=frozenset({1_000_001, 1_000_002}))
    assert [s.index for s in again] == [2_000_002]
    # A bounded source reads the partitions of its first start only.
    assert sources.kafka(first, bootstrap, bounded=True).discovery_interval is None

    # A discovered split is read from its earliest offset, and rebuilt from its
    # checkpointed position by a later attempt without asking the broker.
    split = next(s for s in source.discover(context=context(tmp_path), known=frozenset())
                 if s.index == 1_000_002)
    reader = source.open(split, None, context=context(tmp_path))
    assert [r["value"] for r in read_at_least(reader, 2)] == [b"a", b"b"]
    position = reader.position()
    reader.close()
    (rebuilt,) = [item for item in source.restore_splits(
        planned, {1_000_002: position}, context=context(tmp_path))
        if item.split.index == 1_000_002]
    assert rebuilt.split.description.partition == 2
    produce(bootstrap, first, [b"c"], partition=2)
    reader = source.open(rebuilt.split, rebuilt.position, context=context(tmp_path))
    assert [r["value"] for r in read_at_least(reader, 1)] == [b"c"]
    reader.close()


def test_a_reader_restored_from_a_position_continues_exactly_there(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=1)
    produce(bootstrap, topic, [b"v%d" % i for i in range(100)])

    ctx = context(tmp_path, batch_size=10)
    source = sources.kafka(topic, bootstrap)
    split = only_split(source, ctx)
    reader = source.open(split, None, context=ctx)
    first: list[dict[str, Any]] = []
    deadline = time.monotonic() + READ_TIMEOUT
    while len(first) < 30:
        batch = reader.read_batch()
        assert batch is not None and len(batch) <= 10
        first.extend(batch.rows)
        assert time.monotonic() < deadline
    # What a checkpoint stores is JSON.
    position = json.loads(json.dumps(reader.position()))
    reader.close()
    assert position["offset"] == len(first)

    # A new process: another source object, the position from the checkpoint.
    restored = sources.kafka(topic, bootstrap)
    reader = restored.open(only_split(restored, ctx), position, context=ctx)
    rest = read_at_least(reader, 100 - len(first))
    reader.close()
    offsets = [r["offset"] for r in first + rest]
    assert offsets == list(range(100)), "a gap or a duplicate at the restore"
    assert [r["value"] for r in first + rest] == [b"v%d" % i for i in range(100)]


def test_a_bounded_source_ends_at_the_end_offsets_of_its_first_start_after_more_records_and_a_restore(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=2)
    produce(bootstrap, topic, [b"early-%d" % i for i in range(10)], partition=0)
    sources.kafka(topic, bootstrap, bounded=True).prepare_on_driver(
        spark_context=None, staging=driver_staging(tmp_path))
    produce(bootstrap, topic, [b"late-%d" % i for i in range(5)], partition=0)
    produce(bootstrap, topic, [b"late-%d" % i for i in range(5)], partition=1)

    ctx = context(tmp_path, batch_size=4)
    source = sources.kafka(topic, bootstrap, bounded=True)
    zero, one = source.splits(context=ctx)
    assert (zero.description.start, zero.description.end) == (0, 10)
    assert (one.description.start, one.description.end) == (0, 0)

    # The empty partition ends at once.
    started = time.monotonic()
    assert source.open(one, None, context=ctx).read_batch() is None
    assert time.monotonic() - started < 1.0

    reader = source.open(zero, None, context=ctx)
    first = read_at_least(reader, 4)
    position = json.loads(json.dumps(reader.position()))
    reader.close()
    assert position["end"] == 10
    produce(bootstrap, topic, [b"later-%d" % i for i in range(5)], partition=0)

    restored = sources.kafka(topic, bootstrap, bounded=True)
    reader = restored.open(restored.splits(context=ctx)[0], position, context=ctx)
    rest = read_to_end(reader)
    assert reader.read_batch() is None
    reader.close()
    assert [r["value"] for r in first + rest] == [b"early-%d" % i for i in range(10)]


def test_an_unbounded_reader_returns_an_empty_batch_promptly_when_idle_and_later_records_when_they_come(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=1)
    ctx = context(tmp_path)
    source = sources.kafka(topic, bootstrap)
    reader = source.open(only_split(source, ctx), None, context=ctx)
    for _ in range(20):
        started = time.monotonic()
        batch = reader.read_batch()
        took = time.monotonic() - started
        assert batch is not None and len(batch) == 0
        assert took < 0.5, f"an idle read took {took:.2f}s"

    produce(bootstrap, topic, [b"x", b"y", b"z"])
    rows = read_at_least(reader, 3)
    assert [r["value"] for r in rows] == [b"x", b"y", b"z"]
    assert [r["offset"] for r in rows] == [0, 1, 2]
    assert reader.position()["offset"] == 3
    reader.close()


def reader_of_ten_records(kafka_broker: KafkaBroker, tmp_path: Path) -> tuple[str, SplitReader]:
    """A reader of a new one-partition topic that holds ten records, 3 a batch."""
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=1)
    produce(bootstrap, topic, [b"r%d" % i for i in range(10)])
    ctx = context(tmp_path)
    source = sources.kafka(topic, bootstrap, batch_size=3)
    return topic, source.open(only_split(source, ctx), None, context=ctx)


def test_a_readers_backlog_is_the_records_between_its_position_and_the_partitions_end(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    topic, reader = reader_of_ten_records(kafka_broker, tmp_path)
    early = reader.backlog()                        # before a fetch: unknown, not zero
    assert early is None or early.records == 10
    rows = read_at_least(reader, 3)
    backlog = reader.backlog()
    assert backlog is not None
    assert (backlog.topic, backlog.partition) == (topic, 0)
    assert backlog.records == 10 - len(rows)
    read_at_least(reader, 10 - len(rows))
    backlog = reader.backlog()
    assert backlog is not None and backlog.records == 0
    reader.close()


def test_a_readers_backlog_is_known_before_its_first_read(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    """A subtask reads its partitions in turn, and one batch can take long to process:
    the partitions it has not read from yet count in its lag all the same (the
    autoscaler sizes the job from that sum)."""
    topic, reader = reader_of_ten_records(kafka_broker, tmp_path)
    deadline = time.monotonic() + READ_TIMEOUT
    while (backlog := reader.backlog()) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert backlog is not None, "no backlog known while nothing was read"
    assert (backlog.topic, backlog.partition, backlog.records) == (topic, 0, 10)
    reader.close()


def test_json_values_are_decoded_into_columns_beside_the_records_metadata(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=1)
    values = [json.dumps({"user": f"u{i}", "amount": i, "tags": ["a"] * i}).encode()
              for i in range(5)]
    produce(bootstrap, topic, values, headers=[("source", b"test")])

    ctx = context(tmp_path)
    source = sources.kafka(topic, bootstrap, bounded=True, value_format="json")
    reader = source.open(only_split(source, ctx), None, context=ctx)
    batch = first_records(reader)
    assert batch.has_arrow
    schema = batch.arrow.schema
    assert schema.field("user").type == pa.string()
    assert schema.field("amount").type == pa.int64()
    assert schema.field("tags").type == pa.list_(pa.string())
    assert "value" not in schema.names
    rows = batch.rows + read_to_end(reader)
    reader.close()
    assert [(r["user"], r["amount"], len(r["tags"])) for r in rows] == [
        (f"u{i}", i, i) for i in range(5)]
    assert [r["offset"] for r in rows] == list(range(5))
    assert {r["partition"] for r in rows} == {0} and {r["topic"] for r in rows} == {topic}
    assert rows[0]["key"] == b"k0"
    assert rows[0]["headers"] == [{"key": "source", "value": b"test"}]
    assert abs(rows[0]["timestamp"] - time.time() * 1000) < 120_000


@pytest.mark.parametrize("columns", [
    frozenset({"user"}), frozenset({"user", "amount", "offset"}),
    frozenset({"user", "key", "headers", "timestamp", "partition", "topic"})])
def test_a_reader_told_the_pipelines_columns_builds_only_those_with_the_same_values(
        kafka_broker: KafkaBroker, tmp_path: Path, columns: frozenset[str]) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=1)
    values = [json.dumps({"user": f"u{i}", "amount": i}).encode() for i in range(300)]
    produce(bootstrap, topic, values[:150])
    produce(bootstrap, topic, values[150:], headers=[("source", b"test")])
    source = sources.kafka(topic, bootstrap, bounded=True, value_format="json")

    everything = read_to_end(source.open(only_split(source, context(tmp_path)), None,
                                         context=context(tmp_path)))
    ctx = dataclasses.replace(context(tmp_path), columns=columns)
    reader = source.open(only_split(source, ctx), None, context=ctx)
    batch = first_records(reader)
    assert set(batch.arrow.schema.names) == columns
    rows = batch.rows + read_to_end(reader)
    reader.close()
    assert rows == [{name: row[name] for name in columns} for row in everything]
    assert len(rows) == 300


def test_with_a_dead_letter_topic_bad_values_go_there_with_their_origin_and_the_rest_is_read(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=1)
    dead = create_topic(bootstrap=bootstrap, partitions=1)
    produce(bootstrap, topic, [b'{"n": 0}', b'{"n": 1', b'{"n": 2}', b"[3]", b'{"n": 4}'],
            headers=[("source", b"test")])
    ctx = context(tmp_path)
    source = sources.kafka(topic, bootstrap, bounded=True, value_format="json",
                           bad_records="dead-letter", dead_letter_topic=dead)
    source.resolve_plan()
    reader = source.open(only_split(source, ctx), None, context=ctx)
    rows = read_to_end(reader)
    assert reader.position()["offset"] == 5         # past the bad records too
    reader.close()
    assert [r["n"] for r in rows] == [0, 2, 4]

    letters = read_topic(bootstrap=bootstrap, topic=dead)
    assert [letter.value for letter in letters] == [b'{"n": 1', b"[3]"]
    assert [letter.key for letter in letters] == [b"k1", b"k3"]
    origins = [dict(read_headers(bootstrap, dead)[i]) for i in range(2)]
    assert [(o["cjob.topic"], o["cjob.partition"], o["cjob.offset"]) for o in origins] == [
        (topic.encode(), b"0", b"1"), (topic.encode(), b"0", b"3")]
    assert origins[0]["cjob.error"].startswith(b"the value is not valid JSON")
    assert origins[1]["cjob.error"] == b"the value is JSON but not an object (list)"
    assert origins[0]["source"] == b"test"


def test_a_dead_letter_topic_that_does_not_exist_is_one_line_from_the_driver(
        kafka_broker: KafkaBroker) -> None:
    topic = create_topic(bootstrap=kafka_broker.bootstrap, partitions=1)
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    source = sources.kafka(topic, kafka_broker.bootstrap, value_format="json",
                           bad_records="dead-letter", dead_letter_topic=missing)
    with pytest.raises(ConfigurationError) as raised:
        source.resolve_plan()
    assert raised.value.describe() == (f"sources.kafka: the dead-letter topic {missing!r} does "
                                       f"not exist at {kafka_broker.bootstrap}")


def read_headers(bootstrap: str, topic: str) -> list[list[tuple[str, bytes]]]:
    """The headers of every record of a one-partition topic, in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    found: list[list[tuple[str, bytes]]] = []
    try:
        while True:
            message = consumer.poll(10.0)
            assert message is not None, f"no end of {topic}"
            if message.error() is not None:
                return found
            found.append([(str(k), v if isinstance(v, bytes) else str(v).encode())
                          for k, v in (message.headers() or [])])
    finally:
        consumer.close()


def test_an_unknown_topic_is_one_line_from_the_driver_and_stages_nothing(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    topic = f"missing-{uuid.uuid4().hex[:8]}"
    source = sources.kafka(topic, kafka_broker.bootstrap)
    with pytest.raises(ConfigurationError) as raised:
        source.prepare_on_driver(spark_context=None, staging=driver_staging(tmp_path))
    message = str(raised.value)
    assert message == f"sources.kafka: topic {topic!r} does not exist at {kafka_broker.bootstrap}"
    assert not (tmp_path / "staging").exists()


def test_brokers_that_do_not_answer_are_one_line_within_the_timeout(tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    source = sources.kafka("events", address, timeout=2.0)
    started = time.monotonic()
    with pytest.raises(ConfigurationError) as raised:
        source.prepare_on_driver(spark_context=None, staging=driver_staging(tmp_path))
    assert time.monotonic() - started < 10.0
    message = str(raised.value)
    assert message.startswith(f"sources.kafka: no Kafka broker at {address} answered within 2s")
    assert "\n" not in message


def test_a_value_that_is_not_a_json_object_fails_with_its_topic_partition_and_offset(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=1)
    produce(bootstrap, topic, [b'{"n": 0}', b'{"n": 1}', b'{"n": 2'])

    ctx = context(tmp_path)
    source = sources.kafka(topic, bootstrap, bounded=True, value_format="json")
    reader = source.open(only_split(source, ctx), None, context=ctx)
    with pytest.raises(UserCodeError) as raised:
        read_to_end(reader)
    reader.close()
    details = raised.value.details
    assert details.startswith(f"kafka topic {topic!r} partition 0 offset 2: the value is not "
                              "valid JSON")
    assert "\n" not in details


def test_a_checkpointed_position_of_another_partition_is_refused(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    topic = create_topic(bootstrap=kafka_broker.bootstrap, partitions=1)
    ctx = context(tmp_path)
    source = sources.kafka(topic, kafka_broker.bootstrap, bounded=True)
    position = {"topic": "other", "partition": 0, "offset": 5, "end": 9}
    with pytest.raises(UserCodeError) as raised:
        source.open(only_split(source, ctx), position, context=ctx)
    assert "the topics or their partitions changed since the checkpoint" in raised.value.details
