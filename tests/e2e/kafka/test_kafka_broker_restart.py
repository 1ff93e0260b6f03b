"""A broker restart loses nothing: the same address, the same topics and committed
records at the same offsets, and transactional ids that go on working."""

from __future__ import annotations

import uuid

from e2e.kafka import KafkaBroker, create_topic, read_topic, transactional_producer


def test_topics_committed_records_and_transactional_ids_survive_a_broker_restart(
    kafka_broker: KafkaBroker,
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=2)
    transactional_id = f"tx-{uuid.uuid4()}"
    producer = transactional_producer(bootstrap=bootstrap, transactional_id=transactional_id)
    producer.begin_transaction()
    for i in range(100):
        producer.produce(topic, key=str(i).encode(), value=f"before-{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    before = read_topic(bootstrap=bootstrap, topic=topic)
    assert len(before) == 100

    kafka_broker.restart()

    assert kafka_broker.bootstrap == bootstrap
    assert read_topic(bootstrap=bootstrap, topic=topic) == before
    successor = transactional_producer(bootstrap=bootstrap, transactional_id=transactional_id)
    successor.begin_transaction()
    successor.produce(topic, value=b"after-the-restart", partition=0)
    successor.commit_transaction(30)
    after = read_topic(bootstrap=bootstrap, topic=topic)
    assert len(after) == 101
    assert [r.value for r in after if r not in before] == [b"after-the-restart"]
