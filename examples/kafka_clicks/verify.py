"""Verify the click counts: every click counted exactly once.

Reads both topics ``read_committed``. For each user the job emits its running count
after every click, so the counts of a user, sorted, must be exactly 1, 2, ..., n for
its n clicks: a lost click leaves a number out, a click counted twice repeats one.
Exit code 0 and ``output exactly-once`` when it holds.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import uuid


def read_values(bootstrap: str, topic: str, *, timeout: float = 60.0) -> list[dict[str, object]]:
    """Every value of ``topic`` a read_committed consumer sees now, decoded."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed"})
    try:
        described = consumer.list_topics(topic=topic, timeout=timeout).topics[topic]
        pending = set(described.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        values: list[dict[str, object]] = []
        while pending:
            message = consumer.poll(timeout)
            if message is None:
                raise TimeoutError(f"no end of {topic} within {timeout:g}s")
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                pending.discard(message.partition())
            elif error is not None:
                raise RuntimeError(str(error))
            else:
                values.append(json.loads(message.value() or b"{}"))
        return values
    finally:
        consumer.close()


def verify(clicks: list[dict[str, object]], counts: list[dict[str, object]]) -> list[str]:
    problems: list[str] = []
    expected = collections.Counter(str(c["user"]) for c in clicks)
    emitted: dict[str, list[int]] = collections.defaultdict(list)
    for record in counts:
        emitted[str(record["user"])].append(int(str(record["clicks"])))
    for user in sorted(set(expected) | set(emitted)):
        got = sorted(emitted.get(user, []))
        if got != list(range(1, expected[user] + 1)):
            repeated = len(got) - len(set(got))
            problems.append(f"user {user}: {len(got)} counts for {expected[user]} clicks"
                            f" ({repeated} repeated)")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP"))
    parser.add_argument("--input", default="clicks")
    parser.add_argument("--output", default="click-counts")
    ns = parser.parse_args()
    if not ns.bootstrap:
        print("verify: give --bootstrap or set KAFKA_BOOTSTRAP", file=sys.stderr)
        return 2
    clicks = read_values(ns.bootstrap, ns.input)
    problems = verify(clicks, read_values(ns.bootstrap, ns.output))
    if problems:
        for problem in problems[:20]:
            print(f"verify: {problem}")
        print("verdict: output NOT exactly-once")
        return 1
    print(f"verdict: output exactly-once ({len(clicks)} clicks, every count once)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
