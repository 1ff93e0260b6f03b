"""A table that follows a compacted Kafka topic (``p.table(sources.kafka(...))``), against
the real broker, without Spark: the operator reads the topic up to its end before the
first record, follows it (a record replaces its key's row, a tombstone removes the row
its message key wrote), and a restore continues from the checkpoint's offsets with
the checkpoint's table."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions
from keyed_operators import Operators

from e2e.kafka import KafkaBroker, create_topic
from job_runtime import Pipeline, sinks, sources
from job_runtime.execution.stages import plan_stages
from job_runtime.operators.keyed_operator import KeyedOperator
from job_runtime.pipeline import KeyedOp
from job_runtime.records import Batch
from job_runtime.sources.source_contract import SourceContext


def send(bootstrap: str, topic: str, messages: list[tuple[bytes, dict[str, Any] | None]]
         ) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in messages:
        producer.produce(topic, key=key, value=None if value is None else json.dumps(value))
    assert producer.flush(30) == 0


def enrich_op(bootstrap: str, topic: str, *, partition_discovery: float = 60.0) -> KeyedOp:
    p = Pipeline()
    table = p.table(sources.kafka(topic, bootstrap, start="earliest", value_format="json",
                                  partition_discovery=partition_discovery),
                    key="sku", name="products")
    p.source(sources.sequence(1)).enrich(table, on="sku").sink(sinks.discard())
    p.validate()
    keyed = plan_stages(p)[-1].keyed
    assert keyed is not None
    return keyed


def opened(operators: Operators, op: KeyedOp, tmp_path: Path,
           blobs: list[bytes] | None = None) -> KeyedOperator:
    operator = operators.make(op)
    if blobs is not None:
        operator.restore(blobs)
    operator.open(sources=SourceContext(subtask=0, parallelism=1,
                                        staging_uri=str(tmp_path / "staging")),
                  cancelled=lambda: False)
    return operator


def prices(operator: KeyedOperator, *skus: str) -> dict[str, Any]:
    out = operator.process(Batch(rows=[{"sku": sku, "n": i} for i, sku in enumerate(skus)]))
    return {r["sku"]: r.get("price") for r in out.rows}


def wait_for(condition: Callable[[], bool], *, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


@pytest.fixture
def operators(tmp_path: Path) -> Operators:
    return Operators("hashmap", tmp_path)


def test_the_table_is_the_topic_compacted_and_follows_it_through_a_restore(
        kafka_broker: KafkaBroker, operators: Operators, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=2,
                         config={"cleanup.policy": "compact"})
    send(bootstrap, topic, [(b"a", {"sku": "a", "price": 1.0}),
                            (b"b", {"sku": "b", "price": 2.0}),
                            (b"a", {"sku": "a", "price": 3.0}),
                            (b"c", {"sku": "c", "price": 5.0}),
                            (b"c", None)])
    op = enrich_op(bootstrap, topic)
    operator = opened(operators, op, tmp_path)
    try:
        # The whole backlog is read before the first record is enriched.
        assert prices(operator, "a", "b", "c") == {"a": 3.0, "b": 2.0, "c": None}
        assert operator.key_count() == 2
        blob = operators.checkpoint(operator)
        send(bootstrap, topic, [(b"b", None), (b"d", {"sku": "d", "price": 7.0})])
        wait_for(lambda: prices(operator, "d") == {"d": 7.0}, what="the new product")
        assert prices(operator, "b") == {"b": None}
    finally:
        operator.close()

    send(bootstrap, topic, [(b"e", {"sku": "e", "price": 9.0})])
    again = opened(operators, op, tmp_path, blobs=[blob])
    try:
        # The checkpoint's table at once, then what came after its offsets, in order.
        wait_for(lambda: prices(again, "e") == {"e": 9.0}, what="the product sent later")
        assert prices(again, "a", "b", "c", "d") == {"a": 3.0, "b": None, "c": None,
                                                      "d": 7.0}
        out = again.process(Batch(rows=[{"sku": "a"}])).rows
        assert set(out[0]) == {"sku", "price"}, "the metadata columns stay out of a row"
    finally:
        again.close()


def test_a_partition_the_topic_gains_is_found_and_its_rows_join_the_table(
        kafka_broker: KafkaBroker, operators: Operators, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=1,
                         config={"cleanup.policy": "compact"})
    send(bootstrap, topic, [(b"a", {"sku": "a", "price": 1.0})])
    op = enrich_op(bootstrap, topic, partition_discovery=0.5)
    operator = opened(operators, op, tmp_path)
    try:
        assert prices(operator, "a", "b") == {"a": 1.0, "b": None}
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=30)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(topic, key=b"b", value=json.dumps({"sku": "b", "price": 2.0}),
                         partition=1)
        assert producer.flush(30) == 0
        wait_for(lambda: prices(operator, "b") == {"b": 2.0},
                 what="the row written to the topic's new partition")
    finally:
        operator.close()
