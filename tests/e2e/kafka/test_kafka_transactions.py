"""What exactly-once output to Kafka stands on, checked against the real broker: a
``read_committed`` reader sees committed transactions and never an aborted one, and a
producer that died mid-transaction is cleaned up by its successor, not by waiting.
"""

from __future__ import annotations

import selectors
import subprocess
import sys
import uuid
from pathlib import Path

from e2e.kafka import KafkaBroker, create_topic, read_topic, transactional_producer
from e2e.kafka.clients import IsolationLevel

HERE = Path(__file__).resolve().parent


def _values(bootstrap: str, topic: str, *, committed: bool) -> list[bytes | None]:
    isolation: IsolationLevel = "read_committed" if committed else "read_uncommitted"
    records = read_topic(bootstrap=bootstrap, topic=topic, isolation_level=isolation)
    return sorted((r.value for r in records), key=lambda v: v or b"")


def test_a_read_committed_consumer_sees_committed_transactions_and_never_an_aborted_one(
    kafka_broker: KafkaBroker,
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=2)
    producer = transactional_producer(bootstrap=bootstrap, transactional_id=f"tx-{uuid.uuid4()}")

    def transaction(values: list[bytes], *, commit: bool) -> None:
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.produce(topic, value=value, partition=i % 2)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # the records reach the log before the abort
            producer.abort_transaction(30)

    transaction([b"committed-1", b"committed-2"], commit=True)
    transaction([b"aborted-1", b"aborted-2"], commit=False)
    transaction([b"committed-3"], commit=True)

    assert _values(bootstrap, topic, committed=True) == [
        b"committed-1", b"committed-2", b"committed-3",
    ]  # fmt: skip
    # The aborted records are in the log: the isolation level is what keeps them out.
    assert _values(bootstrap, topic, committed=False) == [
        b"aborted-1", b"aborted-2", b"committed-1", b"committed-2", b"committed-3",
    ]  # fmt: skip


def test_a_new_producer_with_the_same_transactional_id_aborts_what_a_crashed_one_left_open(
    kafka_broker: KafkaBroker,
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=1)
    transactional_id = f"crashing-{uuid.uuid4()}"
    child = subprocess.Popen(
        [sys.executable, str(HERE / "open_transaction.py"), bootstrap, topic,
         transactional_id, "5"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(child.stdout, selectors.EVENT_READ)
            assert selector.select(timeout=60), "the producer did not open its transaction"
        assert child.stdout.readline().strip() == "open"
    finally:
        child.kill()
        child.wait()

    assert len(_values(bootstrap, topic, committed=False)) == 5
    # The dead producer's open transaction holds back read_committed readers, even from
    # a transaction committed after it.
    other = transactional_producer(bootstrap=bootstrap, transactional_id=f"tx-{uuid.uuid4()}")
    other.begin_transaction()
    other.produce(topic, value=b"committed-after-the-crash")
    other.commit_transaction(30)
    assert _values(bootstrap, topic, committed=True) == []

    transactional_producer(bootstrap=bootstrap, transactional_id=transactional_id)

    assert _values(bootstrap, topic, committed=True) == [b"committed-after-the-crash"]
