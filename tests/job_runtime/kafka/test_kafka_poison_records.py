"""A poison record in a whole job, on real Spark and the real broker: the job fails in
one line with the code that is not restarted, or routes the record aside and delivers
everything else exactly once.
"""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka import Producer
from runtime_harness import JOBS, JobHarness

from cjob_spec.exit_codes import ExitCode
from e2e.kafka import KafkaBroker, create_topic
from e2e.kafka.clients import read_topic

COUNT = 400
POISON = 150


def prepare(bootstrap: str, **extra: Any) -> dict[str, Any]:
    topic = create_topic(bootstrap=bootstrap, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(COUNT):
        producer.produce(topic, key=str(n % 7).encode(),
                         value=json.dumps({"n": n, "user": f"u{n % 7}"}).encode())
    producer.flush(30)
    return {"bootstrap": bootstrap, "topic": topic,
            "output": create_topic(bootstrap=bootstrap, partitions=2),
            "control": create_topic(bootstrap=bootstrap, partitions=1,
                                    config={"cleanup.policy": "compact"}),
            "poison": POISON, **extra}


def numbers(bootstrap: str, topic: str) -> list[int]:
    return sorted(json.loads(r.value or b"")["n"]
                  for r in read_topic(bootstrap=bootstrap, topic=topic))


def test_a_record_the_broker_refuses_fails_the_job_in_one_line_and_holds_no_reader(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    args = prepare(kafka_broker.bootstrap)
    run = harness.run(entrypoint="kafka_jobs:copy_to_kafka", args=args,
                      python_path=[str(JOBS)], parallelism=1)
    assert run.returncode == ExitCode.SINK_REJECTED, run.explain()
    [line] = [line for line in run.output.splitlines() if "ERROR job_runtime.driver" in line]
    assert "the kafka sink refused a record for good" in line
    assert "interval of checkpoint" in line and "record " in line
    assert "the record is too large" in line
    # Whatever reached the topic is committed: a read_committed reader reads to its end
    # (an open transaction would hold it at its first record, and this read would show
    # none of what a probe commits after it).
    probe = Producer({"bootstrap.servers": kafka_broker.bootstrap,
                      "transactional.id": f"probe-{args['output']}"})
    probe.init_transactions(20)
    probe.begin_transaction()
    probe.produce(args["output"], value=json.dumps({"n": -1}).encode())
    probe.commit_transaction(20)
    seen = numbers(kafka_broker.bootstrap, args["output"])
    assert -1 in seen and POISON not in seen
    assert len(seen) == len(set(seen))


def test_with_a_dead_letter_topic_the_job_finishes_and_every_other_record_arrives_once(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    dead_letters = create_topic(bootstrap=kafka_broker.bootstrap, partitions=1)
    args = prepare(kafka_broker.bootstrap, dead_letter_topic=dead_letters)
    run = harness.run(entrypoint="kafka_jobs:copy_to_kafka", args=args,
                      python_path=[str(JOBS)], parallelism=2)
    assert run.returncode == 0, run.explain()
    assert numbers(kafka_broker.bootstrap, args["output"]) == [
        n for n in range(COUNT) if n != POISON]
    [letter] = read_topic(bootstrap=kafka_broker.bootstrap, topic=dead_letters)
    headers = dict(letter.headers)
    assert headers["cjob.error"].startswith(b"the record is too large")
    assert letter.key == f"u{POISON % 7}".encode()
