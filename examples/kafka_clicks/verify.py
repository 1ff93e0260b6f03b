"""Verify the click counts: every click counted exactly once.

Reads both topics ``read_committed``. For each user the job emits its running count
after every click, so the counts of a user, sorted, must be exactly 1, 2, ..., n for
its n clicks: a lost click leaves a number out, a click counted twice repeats one.
With ``--window`` (the job's ``window`` in milliseconds) the output is one count per
user and tumbling window instead, and each must appear exactly once with the number
of clicks whose ``ts`` falls in it. Exit code 0 and ``output exactly-once`` when it
holds.
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


def verify_windows(clicks: list[dict[str, object]], counts: list[dict[str, object]], *,
                   size_ms: int) -> list[str]:
    """Every (user, window) of the clicks counted exactly once, with its number of clicks."""
    expected: collections.Counter[tuple[str, int]] = collections.Counter()
    for click in clicks:
        ts = int(str(click["ts"]))
        expected[(str(click["user"]), ts - ts % size_ms)] += 1
    seen: dict[tuple[str, int], list[int]] = collections.defaultdict(list)
    problems: list[str] = []
    for record in counts:
        key = (str(record["user"]), int(str(record["window_start"])))
        seen[key].append(int(str(record["n"])))
        if int(str(record["window_end"])) != key[1] + size_ms:
            problems.append(f"{key}: window_end {record['window_end']}")
    for key in sorted(set(expected) | set(seen)):
        if seen.get(key) != [expected[key]]:
            problems.append(f"user {key[0]}, window at {key[1]}: counts {seen.get(key, [])}, "
                            f"{expected[key]} clicks")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP"))
    parser.add_argument("--input", default="clicks")
    parser.add_argument("--output", default="click-counts")
    parser.add_argument("--window", type=int, metavar="MS",
                        help="the job's window in milliseconds, when it counts per window")
    ns = parser.parse_args()
    if not ns.bootstrap:
        print("verify: give --bootstrap or set KAFKA_BOOTSTRAP", file=sys.stderr)
        return 2
    clicks = read_values(ns.bootstrap, ns.input)
    counts = read_values(ns.bootstrap, ns.output)
    problems = (verify(clicks, counts) if ns.window is None
                else verify_windows(clicks, counts, size_ms=ns.window))
    if problems:
        for problem in problems[:20]:
            print(f"verify: {problem}")
        print("verdict: output NOT exactly-once")
        return 1
    what = "every count once" if ns.window is None else "every window's count once"
    print(f"verdict: output exactly-once ({len(clicks)} clicks, {what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
