"""A producer that crashes mid-transaction: it begins one, produces into it, says ``open``
on stdout once the records are on the broker, and waits to be killed.

Run as ``python open_transaction.py BOOTSTRAP TOPIC TRANSACTIONAL_ID COUNT``. Its
transaction timeout is ten minutes, so within a test only the next producer with the
same transactional id can end the transaction, never the broker's timer.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Producer


def main() -> None:
    bootstrap, topic, transactional_id, count = sys.argv[1:5]
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "transaction.timeout.ms": 600_000,
    })  # fmt: skip
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(int(count)):
        producer.produce(topic, value=f"crashed-{i}".encode())
    producer.flush(30)
    print("open", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
