"""Produce click events for the example: ``--count`` clicks of ``--users`` users.

Users are skewed (user ``u0`` clicks most, as real traffic does); each event is
``{"user": "u<k>", "page": "/p<m>", "ts": <ms>}``. Creates the topics when missing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time


def clicks(*, count: int, users: int, seed: int = 7) -> list[dict[str, object]]:
    rng = random.Random(seed)
    weights = [1.0 / (k + 1) for k in range(users)]
    chosen = rng.choices(range(users), weights=weights, k=count)
    start = int(time.time() * 1000)
    return [{"user": f"u{k}", "page": f"/p{rng.randrange(50)}", "ts": start + i}
            for i, k in enumerate(chosen)]


def ensure_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if name in admin.list_topics(timeout=30).topics:
        return
    new = NewTopic(name, num_partitions=partitions, replication_factor=-1)
    admin.create_topics([new])[name].result(timeout=30)


def produce(bootstrap: str, topic: str, events: list[dict[str, object]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for event in events:
        while True:
            try:
                producer.produce(topic, key=str(event["user"]).encode(),
                                 value=json.dumps(event).encode())
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(60):
        raise RuntimeError("not every click was acknowledged within 60 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP"))
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--output", default="click-counts")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1000)
    ns = parser.parse_args()
    if not ns.bootstrap:
        print("produce: give --bootstrap or set KAFKA_BOOTSTRAP", file=sys.stderr)
        return 2
    ensure_topic(ns.bootstrap, ns.topic, ns.partitions)
    ensure_topic(ns.bootstrap, ns.output, ns.partitions)
    produce(ns.bootstrap, ns.topic, clicks(count=ns.count, users=ns.users))
    print(f"produced {ns.count} clicks of {ns.users} users to {ns.topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
