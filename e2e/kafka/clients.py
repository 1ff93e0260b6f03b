"""Clients of a test broker: create a topic with N partitions, read one to its end, and a
transactional producer ready to begin transactions.

:func:`read_topic` reads what a consumer of the given isolation level can see *now*:
with ``read_committed`` that stops at the last stable offset, so records after an
open transaction are not returned until it ends, exactly as a downstream job would
see them. Tests of exactly-once output compare against that.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Mapping
from typing import Literal

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

# NewTopic's documented home is confluent_kafka.admin, whose stubs do not re-export it.
from confluent_kafka.cimpl import NewTopic

IsolationLevel = Literal["read_committed", "read_uncommitted"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Record:
    """One record as a consumer got it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


def create_topic(
    *,
    bootstrap: str,
    partitions: int,
    name: str | None = None,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> str:
    """Create a topic (a fresh unique name unless ``name`` is given) and return its name.

    Returns once every partition has a leader in the broker's metadata, so a producer
    started right after does not begin with a round of unknown-partition retries.
    """
    topic = name or f"test-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1,
                   config=dict(config or {}))  # fmt: skip
    admin.create_topics([new], request_timeout=timeout)[topic].result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        described = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        if (
            described is not None
            and described.error is None
            and len(described.partitions) == partitions
            and all(p.leader >= 0 for p in described.partitions.values())
        ):
            return topic
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} has no leader for every partition after {timeout}s")
        time.sleep(0.1)


def read_topic(
    *,
    bootstrap: str,
    topic: str,
    isolation_level: IsolationLevel = "read_committed",
    timeout: float = 30.0,
) -> list[Record]:
    """Every record of ``topic`` a consumer of ``isolation_level`` sees, by partition and offset.

    It reads each partition from its beginning until the consumer reports its end (the
    high watermark, or for ``read_committed`` the last stable offset), without a
    consumer group, so it neither joins a group nor commits offsets.
    """
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"read-topic-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation_level,
    })  # fmt: skip
    try:
        described = consumer.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        if described is None or described.error is not None or not described.partitions:
            raise ValueError(f"topic {topic} does not exist")
        pending = set(described.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(pending)])
        records: list[Record] = []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"partitions {sorted(pending)} of {topic} not read to their end in {timeout}s"
                )
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"reading {topic}: {error}")
                pending.discard(message.partition() or 0)
                continue
            records.append(Record(
                partition=message.partition() or 0, offset=message.offset() or 0,
                key=message.key(), value=message.value(),
                headers=tuple((str(name), value.encode() if isinstance(value, str)
                               else bytes(value or b""))
                              for name, value in list(message.headers() or [])),
            ))  # fmt: skip
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def transactional_producer(
    *,
    bootstrap: str,
    transactional_id: str,
    config: Mapping[str, str | int] | None = None,
    timeout: float = 30.0,
) -> Producer:
    """A producer with ``transactional_id``, its transactions initialised.

    Initialising fences any earlier producer with the same id and aborts the
    transaction that one left open; ``config`` adds or overrides client settings.
    """
    settings: dict[str, str | int] = {
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        **(config or {}),
    }
    producer = Producer(settings)
    producer.init_transactions(timeout)
    return producer
