"""Event-time windows over a never-ending Kafka topic: a partition that gets no records
must not hold every window open. With ``idle_after``, windows fire and commit from the
busy partition's event time alone while the job runs; records then arriving on the
quiet partition make it count again."""

from __future__ import annotations

import json
import time
from typing import Any

from confluent_kafka import Producer
from runtime_harness import JobHarness

from e2e.kafka import KafkaBroker, create_topic

START = 1_767_225_600_000
WAIT = 90.0


def produce(bootstrap: str, topic: str, events: list[dict[str, Any]], *, partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for event in events:
        producer.produce(topic, value=json.dumps(event).encode(), partition=partition)
    assert producer.flush(30) == 0


def fired(harness: JobHarness) -> dict[tuple[str, int], int]:
    if not harness.output.exists():
        return {}
    return {(r["user"], int(r["window_start"])): int(r["n"]) for r in harness.output_records()}


def test_an_idle_partition_does_not_hold_windows_back_while_the_job_runs(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=2)
    # Ten seconds of event time on partition 0 only; partition 1 stays empty.
    produce(bootstrap, topic, [{"user": f"u{i % 3}", "ts": START + i * 100} for i in range(100)],
            partition=0)
    proc = harness.start(entrypoint="kafka_jobs:windowed_counts", parallelism=1,
                         master="local[1]", args={"topic": topic, "bootstrap": bootstrap,
                                                  "output": str(harness.output),
                                                  "idle_after": "1s"})
    try:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and len(fired(harness)) < 27:
            assert proc.poll() is None, "the unbounded job ended by itself"
            time.sleep(0.5)
        windows = fired(harness)
        # Windows up to the watermark (9.9 s - 0.2 s) fired: 9 seconds of 3 users each.
        assert {start for _, start in windows} == {START + s * 1000 for s in range(9)}
        assert all(n in (3, 4) for n in windows.values())
        assert sum(windows.values()) == 90

        # The quiet partition wakes up with one record and falls quiet again, while the
        # busy one goes on: once the quiet one is idle, the busy one's time passes
        # that record's window, which fires.
        produce(bootstrap, topic, [{"user": "u9", "ts": START + 20_000}], partition=1)
        busy = START + 21_000
        while time.monotonic() < deadline and ("u9", START + 20_000) not in fired(harness):
            produce(bootstrap, topic, [{"user": "u0", "ts": busy}], partition=0)
            busy += 500
            time.sleep(0.5)
        assert fired(harness).get(("u9", START + 20_000)) == 1
    finally:
        proc.terminate()
        harness.finish(proc, attempt=1, timeout=60)
