"""A job reading Kafka with the bounded ``kafka`` source into the files sink, on real
Spark and the real broker: its driver killed mid-way and restarted from the latest
checkpoint, every record appears in the output exactly once; and a topic that does
not exist ends the driver with one line.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter

from confluent_kafka import Producer
from runtime_harness import JobHarness, error_lines

from cjob_spec.exit_codes import ExitCode
from e2e.kafka import KafkaBroker, create_topic

COUNT = 3000
PARTITIONS = 3
DELAY = 0.003  # seconds per record: the subtask with two partitions reads for about 6 s


def produce(bootstrap: str, topic: str, numbers: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in numbers:
        producer.produce(topic, value=json.dumps({"n": n}).encode(), partition=n % PARTITIONS)
    assert producer.flush(30) == 0


def test_a_bounded_kafka_job_whose_driver_is_killed_mid_way_writes_every_record_exactly_once(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap=bootstrap, partitions=PARTITIONS)
    produce(bootstrap, topic, range(COUNT))
    args = {"topic": topic, "bootstrap": bootstrap, "output": str(harness.output),
            "delay": DELAY}

    # SIGKILL of the driver's process group once checkpoint 3 is in the store, before
    # any sink was told to commit it.
    first = harness.run(entrypoint="kafka_jobs:bounded_copy", args=args, attempt=1,
                        env={"CJOB_FAULTS": "driver.before-notify@3"})
    assert first.returncode == -9, first.explain()
    committed = harness.output_records() if harness.output.exists() else []
    assert len(committed) < COUNT, "the job ended before the kill"
    # Records that arrive after the first start are past the bounded end.
    produce(bootstrap, topic, range(COUNT, COUNT + 300))

    second = harness.run(entrypoint="kafka_jobs:bounded_copy", args=args, attempt=2,
                         extra=["--restore", "latest"])
    assert second.returncode == 0, second.explain()
    assert second.status is not None
    assert second.status["restoredFrom"] is not None
    assert second.status["restoredFrom"]["id"] == 3

    records = harness.output_records()
    counts = Counter(r["n"] for r in records)
    assert sorted(counts) == list(range(COUNT)), "records lost, or read past the bounded end"
    assert [n for n, times in counts.items() if times > 1] == [], "records written twice"
    assert all(r["partition"] == r["n"] % PARTITIONS for r in records)
    assert len({(r["partition"], r["offset"]) for r in records}) == COUNT


def test_a_topic_that_does_not_exist_ends_the_driver_with_one_error_line(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    topic = f"missing-{uuid.uuid4().hex[:8]}"
    run = harness.run(entrypoint="kafka_jobs:bounded_copy", timeout=180,
                      args={"topic": topic, "bootstrap": kafka_broker.bootstrap,
                            "output": str(harness.output)})
    assert run.returncode == ExitCode.BAD_CONFIG, run.explain()
    errors = error_lines(run.output)
    assert len(errors) == 1, run.output
    assert errors[0].endswith(
        f"sources.kafka: topic {topic!r} does not exist at {kafka_broker.bootstrap}")
    assert "Traceback" not in run.output
