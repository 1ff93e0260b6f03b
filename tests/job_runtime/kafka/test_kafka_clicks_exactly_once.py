"""The click-count example (``examples/kafka_clicks``): Kafka in, a keyed count, Kafka
out through transactions, on real Spark and the real broker. Killed where an
exactly-once Kafka sink can lose or repeat output, every count is read back once by a
``read_committed`` consumer.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions
from paths import REPO
from runtime_harness import JobHarness, load_example

from e2e.kafka import KafkaBroker, create_topic
from job_runtime.sinks.kafka import DEFAULT_CONTROL_TOPIC, control_topic_of, read_markers

EXAMPLE = REPO / "examples" / "kafka_clicks"
COUNT = 3000
DELAY = 0.003  # seconds per click: about 5 s of reading over two subtasks

produce = load_example("examples/kafka_clicks/produce.py")
verify = load_example("examples/kafka_clicks/verify.py")


def prepare(bootstrap: str) -> dict[str, Any]:
    source = create_topic(bootstrap=bootstrap, partitions=3)
    output = create_topic(bootstrap=bootstrap, partitions=2)
    produce.produce(bootstrap, source, produce.clicks(count=COUNT, users=40))
    return {"bootstrap": bootstrap, "input": source, "output": output, "bounded": True,
            "delay": DELAY}


def problems(args: dict[str, Any]) -> list[str]:
    clicks = verify.read_values(args["bootstrap"], args["input"])
    assert len(clicks) == COUNT
    found: list[str] = verify.verify(clicks, verify.read_values(args["bootstrap"],
                                                                args["output"]))
    return found


def test_a_driver_killed_between_the_stores_commit_and_the_kafka_commit_counts_every_click_once(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    """Checkpoint 3 is in the store, no subtask was told: its intervals are pending and
    the restart sends them (a kill before the store's commit is the files sink's
    recovery tests' case: nothing of it was sent)."""
    fault = "driver.before-notify@3"
    args = prepare(kafka_broker.bootstrap)
    first = harness.run(entrypoint="job:build", args=args, attempt=1,
                        python_path=[str(EXAMPLE)], env={"CJOB_FAULTS": fault})
    assert first.returncode == -9, first.explain()
    second = harness.run(entrypoint="job:build", args=args, attempt=2,
                         python_path=[str(EXAMPLE)], extra=["--restore", "latest"])
    assert second.returncode == 0, second.explain()
    assert second.status is not None and second.status["restoredFrom"] is not None
    assert problems(args) == []


@pytest.mark.parametrize(("before", "after"), [(3, 2), (2, 3)])
def test_a_restart_at_another_parallelism_with_intervals_pending_counts_every_click_once(
        kafka_broker: KafkaBroker, harness: JobHarness, before: int, after: int) -> None:
    """Killed after checkpoint 3 reached the store and before any subtask sent it: its
    intervals are pending and go out from the subtasks of the new parallelism."""
    args = prepare(kafka_broker.bootstrap)
    first = harness.run(entrypoint="job:build", args=args, attempt=1, parallelism=before,
                        master=f"local[{before}]", python_path=[str(EXAMPLE)],
                        env={"CJOB_FAULTS": "driver.before-notify@3"})
    assert first.returncode == -9, first.explain()
    second = harness.run(entrypoint="job:build", args=args, attempt=2, parallelism=after,
                         master=f"local[{after}]", python_path=[str(EXAMPLE)],
                         extra=["--restore", "latest"])
    assert second.returncode == 0, second.explain()
    assert second.status is not None and second.status["restoredFrom"]["id"] == 3
    assert problems(args) == []


def test_a_new_job_restored_from_another_jobs_checkpoint_counts_every_click_once(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    """Job A is killed before checkpoint 5's metadata, after its transactions of
    checkpoint 4 committed. Job B (a new uid and store) restores A's checkpoint 4: A's
    markers say those intervals arrived, B takes over A's transactional ids (aborting
    what A left open) and counts on."""
    args = prepare(kafka_broker.bootstrap)
    first = harness.run(entrypoint="job:build", args=args, attempt=1,
                        python_path=[str(EXAMPLE)],
                        env={"CJOB_FAULTS": "driver.before-metadata@5"})
    assert first.returncode == -9, first.explain()
    sent = read_markers(bootstrap=kafka_broker.bootstrap, control_topic=control_topic_of(
                            DEFAULT_CONTROL_TOPIC, f"{harness.name}-{harness.uid}"),
                        job=f"{harness.name}-{harness.uid}", timeout=30.0, client_config={})
    assert any(checkpoint >= 4 for checkpoint in sent.values()), \
        f"checkpoint 4 was not sent ({sent}): no test"
    checkpoint = harness.checkpoints / f"{harness.name}-{harness.uid}" / "chk-4" / "_metadata"

    second = JobHarness(harness.base)
    second.store = harness.base / "store-of-the-new-job"
    run = second.run(entrypoint="job:build", args=args, attempt=1, python_path=[str(EXAMPLE)],
                     extra=["--restore", checkpoint.as_uri(), "--allow-foreign-restore"])
    assert run.returncode == 0, run.explain()
    assert run.status is not None and run.status["restoredFrom"]["id"] == 4
    assert problems(args) == []


def test_windowed_counts_killed_between_the_stores_commit_and_the_kafka_commit_arrive_once(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    """The example's window mode: Kafka in, counts per user and 500 ms of event time,
    Kafka out. Killed with checkpoint 3's windows in the store and not yet sent, the
    restarted job sends them and fires the rest: every window once, with its count."""
    args = {**prepare(kafka_broker.bootstrap), "window": "500ms", "max_delay": "1s"}
    first = harness.run(entrypoint="job:build", args=args, attempt=1,
                        python_path=[str(EXAMPLE)], env={"CJOB_FAULTS": "driver.before-notify@3"})
    assert first.returncode == -9, first.explain()
    second = harness.run(entrypoint="job:build", args=args, attempt=2,
                         python_path=[str(EXAMPLE)], extra=["--restore", "latest"])
    assert second.returncode == 0, second.explain()
    clicks = verify.read_values(args["bootstrap"], args["input"])
    counts = verify.read_values(args["bootstrap"], args["output"])
    assert sum(int(record["n"]) for record in counts) == COUNT
    assert verify.verify_windows(clicks, counts, size_ms=500) == []


def test_a_subtask_killed_after_its_transaction_committed_does_not_send_it_again(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    args = prepare(kafka_broker.bootstrap)
    run = harness.run(entrypoint="job:build", args=args, attempt=1, python_path=[str(EXAMPLE)],
                      env={"CJOB_FAULTS": "subtask.write-ahead-after-send@2"})
    assert run.returncode == 0, run.explain()
    assert list(harness.faults_dir.iterdir()), "the fault never fired: the test proves nothing"
    assert problems(args) == []


def test_an_unbounded_job_with_more_partitions_than_subtasks_keeps_counting_new_clicks(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    """Never-ending: three partitions on two subtasks, clicks arriving in two waves; the
    job stays running and counts each wave in full, then stops only when told to."""
    bootstrap = kafka_broker.bootstrap
    args = {**prepare(bootstrap), "bounded": False, "delay": 0.0}
    port = free_port()
    proc = harness.start(entrypoint="job:build", args=args, attempt=1,
                         python_path=[str(EXAMPLE)], extra=["--metrics-port", str(port)])
    try:
        wait_until_counted(args, clicks=COUNT, proc=proc)
        produce.produce(bootstrap, args["input"], produce.clicks(count=500, users=40, seed=8))
        wait_until_counted(args, clicks=COUNT + 500, proc=proc)
        assert proc.poll() is None, "an unbounded job ended by itself"
        # Everything was read: the driver reports each partition, with no lag left.
        wait_for_lag(port, topic=args["input"], expected={0: 0, 1: 0, 2: 0})
    finally:
        proc.terminate()
        harness.finish(proc, attempt=1, timeout=60)


def test_partitions_added_while_the_job_runs_are_counted_once_across_a_driver_kill(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    """The input gains two partitions while the job runs: their clicks are counted, the
    driver is killed, and the restarted job goes on from the checkpointed offsets of
    the new partitions too (a missing position would count their clicks twice). The
    consumer group holds the completed checkpoints' offsets for lag monitors."""
    bootstrap = kafka_broker.bootstrap
    args = {**prepare(bootstrap), "bounded": False, "delay": 0.0, "partition_discovery": 0.5}
    proc = harness.start(entrypoint="job:build", args=args, attempt=1,
                         python_path=[str(EXAMPLE)])
    try:
        wait_until_counted(args, clicks=COUNT, proc=proc)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions(args["input"], 5)])[args["input"]].result(30)
        produce_to(bootstrap, args["input"], produce.clicks(count=400, users=40, seed=8),
                   partitions=[3, 4])
        wait_until_counted(args, clicks=COUNT + 400, proc=proc)
        group = f"cjob-{harness.name}-{harness.uid}"
        wait_for_group_offsets(bootstrap, group=group, topic=args["input"],
                               expected=end_offsets(bootstrap, args["input"], partitions=5))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        harness.finish(proc, attempt=1, timeout=60)

    produce_to(bootstrap, args["input"], produce.clicks(count=300, users=40, seed=9),
               partitions=[0, 3, 4])
    proc = harness.start(entrypoint="job:build", args=args, attempt=2,
                         python_path=[str(EXAMPLE)], extra=["--restore", "latest"])
    try:
        wait_until_counted(args, clicks=COUNT + 700, proc=proc)
    finally:
        proc.terminate()
        harness.finish(proc, attempt=2, timeout=60)


def produce_to(bootstrap: str, topic: str, events: list[dict[str, Any]], *,
               partitions: list[int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i, event in enumerate(events):
        producer.produce(topic, key=str(event["user"]).encode(),
                         value=json.dumps(event).encode(),
                         partition=partitions[i % len(partitions)])
    assert producer.flush(60) == 0


def end_offsets(bootstrap: str, topic: str, *, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-ends"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def wait_for_group_offsets(bootstrap: str, *, group: str, topic: str,
                           expected: dict[int, int], timeout: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in expected])
    found: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = admin.list_consumer_group_offsets([request])[group].result(timeout=10)
        found = {tp.partition: tp.offset for tp in answer.topic_partitions}
        if found == expected:
            return
        time.sleep(0.5)
    raise AssertionError(f"group {group} offsets of {topic}: {found}, expected {expected}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


LAG = re.compile(r"^cjob_job_source_lag_records\{([^}]*)\} (\S+)$", re.MULTILINE)
LABEL = re.compile(r'(\w+)="([^"]*)"')


def wait_for_lag(port: int, *, topic: str, expected: dict[int, int],
                 timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    found: dict[int, int] = {}
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        found = {}
        for labels, value in LAG.findall(text):
            named = dict(LABEL.findall(labels))
            if named.get("topic") == topic:
                found[int(named["partition"])] = int(float(value))
        if found == expected:
            return
        time.sleep(0.5)
    raise AssertionError(f"cjob_job_source_lag_records of {topic}: {found}, expected {expected}")


def wait_until_counted(args: dict[str, Any], *, clicks: int, proc: Any,
                       timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    found: list[str] = ["nothing read yet"]
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the job ended before it counted every click"
        read = verify.read_values(args["bootstrap"], args["input"])
        assert len(read) == clicks
        found = verify.verify(read, verify.read_values(args["bootstrap"], args["output"]))
        if not found:
            return
        time.sleep(1.0)
    raise AssertionError(f"not every click counted once within {timeout:g}s: {found[:5]}")
