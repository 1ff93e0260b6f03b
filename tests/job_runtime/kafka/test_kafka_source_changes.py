"""A Kafka job whose input or source definition changes, on real Spark and the real
broker: partitions added while it runs at a parallelism above their count, across a
driver kill; and a restore under a new plan (topics added and reordered, ``start``
changed, a partition added between the runs). Every record the job should read is
written once: none lost, none twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions
from runtime_harness import JobHarness

from e2e.kafka import KafkaBroker, create_topic

WAIT = 150.0


def produce(bootstrap: str, topic: str, numbers: Iterable[int], *,
            partitions: list[int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, n in enumerate(numbers):
        producer.produce(topic, value=json.dumps({"n": n}).encode(),
                         partition=partitions[i % len(partitions)])
    assert producer.flush(30) == 0


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(timeout=30)


def problems(harness: JobHarness, expected: set[int]) -> list[str]:
    """What is wrong with the committed output against ``expected`` (empty: each once)."""
    counts = Counter(r["n"] for r in harness.output_records()) if harness.output.exists() \
        else Counter()
    found = []
    missing = expected - set(counts)
    if missing:
        found.append(f"{len(missing)} records missing, e.g. {sorted(missing)[:5]}")
    twice = sorted(n for n, times in counts.items() if times > 1)
    if twice:
        found.append(f"{len(twice)} records written more than once, e.g. {twice[:5]}")
    extra = sorted(set(counts) - expected)
    if extra:
        found.append(f"{len(extra)} records that should not be read, e.g. {extra[:5]}")
    return found


def wait_until_written(harness: JobHarness, proc: subprocess.Popen[bytes],
                       expected: set[int]) -> None:
    deadline = time.monotonic() + WAIT
    found = problems(harness, expected)
    while found:
        assert proc.poll() is None, f"the job ended: {found}"
        assert time.monotonic() < deadline, f"not every record once within {WAIT:g}s: {found}"
        time.sleep(1.0)
        found = problems(harness, expected)


def test_partitions_added_to_a_topic_with_fewer_partitions_than_subtasks_are_read_once_across_a_driver_kill(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    """One partition, two subtasks: subtask 1 holds nothing at first. The topic grows
    to four partitions while the job runs (two of the new ones are subtask 1's), the
    driver is killed, more records arrive, and the restarted job reads on."""
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=1)
    produce(bootstrap, topic, range(0, 500), partitions=[0])
    args = {"topic": topic, "bootstrap": bootstrap, "output": str(harness.output),
            "bounded": False, "partition_discovery": 0.5}

    proc = harness.start(entrypoint="kafka_jobs:bounded_copy", args=args, attempt=1)
    try:
        wait_until_written(harness, proc, set(range(500)))
        add_partitions(bootstrap, topic, 4)
        produce(bootstrap, topic, range(500, 2000), partitions=[0, 1, 2, 3])
        wait_until_written(harness, proc, set(range(2000)))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        harness.finish(proc, attempt=1, timeout=60)

    produce(bootstrap, topic, range(2000, 2600), partitions=[0, 1, 2, 3])
    proc = harness.start(entrypoint="kafka_jobs:bounded_copy", args=args, attempt=2,
                         extra=["--restore", "latest"])
    try:
        wait_until_written(harness, proc, set(range(2600)))
    finally:
        proc.terminate()
        harness.finish(proc, attempt=2, timeout=60)
    records = harness.output_records()
    assert {r["partition"] for r in records} == {0, 1, 2, 3}
    assert len({(r["partition"], r["offset"]) for r in records}) == len(records) == 2600


def test_a_restore_under_a_new_plan_continues_every_known_partition_once(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    """The first run reads topic A (bounded) and is killed after checkpoint 3. The job
    then reads B and A, in that order, from a point in time (``start`` changed): A
    continues from the checkpoint (not from the new start, which would lose what it had
    not read, nor twice), A's partition added between the runs is read from its
    beginning, and B, new to the job, from the new start."""
    bootstrap = kafka_broker.bootstrap
    first = create_topic(bootstrap=bootstrap, partitions=2)
    second = create_topic(bootstrap=bootstrap, partitions=2)
    produce(bootstrap, first, range(0, 2000), partitions=[0, 1])
    produce(bootstrap, second, range(10_000, 10_300), partitions=[0, 1])
    args = {"topics": [first], "bootstrap": bootstrap, "output": str(harness.output),
            "delay": 0.003}

    run = harness.run(entrypoint="kafka_jobs:bounded_copy", args=args, attempt=1,
                      env={"CJOB_FAULTS": "driver.before-notify@3"})
    assert run.returncode == -9, run.explain()
    assert problems(harness, set(range(2000))), "the first run read everything: no test"

    add_partitions(bootstrap, first, 3)
    produce(bootstrap, first, range(3000, 3300), partitions=[2])
    time.sleep(0.05)
    since = int(time.time() * 1000)
    time.sleep(0.05)
    produce(bootstrap, second, range(10_500, 10_800), partitions=[0, 1])

    replanned = {**args, "topics": [second, first], "start": since, "delay": 0.0}
    run = harness.run(entrypoint="kafka_jobs:bounded_copy", args=replanned, attempt=2,
                      extra=["--restore", "latest"])
    assert run.returncode == 0, run.explain()
    assert run.status is not None and run.status["restoredFrom"]["id"] == 3
    expected = set(range(2000)) | set(range(3000, 3300)) | set(range(10_500, 10_800))
    assert problems(harness, expected) == []

