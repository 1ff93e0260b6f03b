"""The exactly-once Kafka sink against the real broker, one writer at a time.

What a ``read_committed`` reader of the topic sees is the contract: each interval once,
only after its checkpoint completed, whatever died where: a transaction left open by a
crash, a commit that happened just before a crash, a zombie of an older attempt, a
subtask removed by a rescale with its transaction still open.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer

from e2e.kafka import KafkaBroker, create_topic
from e2e.kafka.clients import read_topic, transactional_producer
from job_runtime.errors import ConfigurationError, PipelineDefinitionError
from job_runtime.records import Batch
from job_runtime.sinks import kafka
from job_runtime.sinks.commit import CommitRetry, SinkFencedError
from job_runtime.sinks.kafka import CommitMarker, KafkaSink, control_topic_of, transactional_id
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter

QUICK = CommitRetry(attempts=2, first_delay=0.0, max_delay=0.0)


class Topics:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.output = create_topic(bootstrap=bootstrap, partitions=2)
        self.control = create_topic(bootstrap=bootstrap, partitions=1,
                                    config={"cleanup.policy": "compact"})
        self.job = f"job-{uuid.uuid4().hex[:8]}"

    def sink(self, **kwargs: Any) -> KafkaSink:
        return kafka(self.output, self.bootstrap, key="user", control_topic=self.control,
                     commit_retry=QUICK, timeout=20.0, **kwargs)

    def writer(self, staging: Path, *, subtask: int = 0, parallelism: int = 1,
               restored_parallelism: int = 0, attempt: str = "a1e1") -> SinkWriter:
        return self.sink().open(context=SinkContext(
            subtask=subtask, parallelism=parallelism, attempt_tag=attempt, job_id=self.job,
            staging_root=str(staging), restored_parallelism=restored_parallelism))

    def committed(self) -> list[dict[str, Any]]:
        return [json.loads(r.value or b"") for r in read_topic(bootstrap=self.bootstrap,
                                                               topic=self.output)]

    def numbers(self) -> list[int]:
        return sorted(r["n"] for r in self.committed())

    def leave_open_transaction(self, *, subtask: int, checkpoint: int) -> Producer:
        """What a subtask killed mid-send leaves: records and its marker in a
        transaction nobody will commit."""
        producer = transactional_producer(bootstrap=self.bootstrap,
                                          transactional_id=transactional_id(self.job, subtask))
        producer.begin_transaction()
        producer.produce(self.output, value=json.dumps({"n": -1, "user": "ghost"}).encode())
        marker = CommitMarker(job=self.job, subtask=subtask, checkpoint=checkpoint)
        producer.produce(self.control, key=marker.key, value=marker.value())
        producer.flush(10)
        return producer


@pytest.fixture
def topics(kafka_broker: KafkaBroker) -> Topics:
    return Topics(kafka_broker.bootstrap)


def records(*numbers: int) -> Batch:
    return Batch(rows=[{"n": n, "user": f"u{n % 3}"} for n in numbers])


class TestWhatReadersSee:
    def test_an_interval_appears_in_one_transaction_once_its_checkpoint_completes(
            self, topics: Topics, tmp_path: Path) -> None:
        writer = topics.writer(tmp_path)
        writer.write(records(1, 2, 3))
        writer.snapshot(1)
        writer.write(records(4))
        assert topics.committed() == []
        writer.notify_complete(1)
        assert topics.numbers() == [1, 2, 3]
        writer.snapshot(2)
        writer.notify_complete(2)
        assert topics.numbers() == [1, 2, 3, 4]
        keyed = read_topic(bootstrap=topics.bootstrap, topic=topics.output)
        assert {(r.key, json.loads(r.value or b"")["user"]) for r in keyed} == {
            (b"u0", "u0"), (b"u1", "u1"), (b"u2", "u2")}

    def test_at_least_once_records_are_visible_once_the_barrier_passed(
            self, topics: Topics, tmp_path: Path) -> None:
        writer = topics.sink(delivery="at-least-once").open(context=SinkContext(
            subtask=0, parallelism=1, attempt_tag="a1e1", job_id=topics.job))
        writer.write(records(1, 2))
        writer.snapshot(1)
        assert topics.numbers() == [1, 2]


class TestCrashes:
    def test_a_transaction_left_open_by_a_crash_is_aborted_and_its_interval_sent_once(
            self, topics: Topics, tmp_path: Path) -> None:
        writer = topics.writer(tmp_path)
        writer.write(records(1, 2))
        state = writer.snapshot(1)
        topics.leave_open_transaction(subtask=0, checkpoint=1)   # killed mid-send

        restored = topics.writer(tmp_path, attempt="a2e1")
        restored.restore([state])
        assert topics.numbers() == [1, 2]

    def test_an_interval_committed_just_before_a_crash_is_not_sent_again(
            self, topics: Topics, tmp_path: Path) -> None:
        writer = topics.writer(tmp_path)
        writer.write(records(1, 2))
        state = writer.snapshot(1)
        writer.write(records(3))
        state = writer.snapshot(2)
        writer.notify_complete(1)          # 1 is in the topic; 2 is not; then the crash

        restored = topics.writer(tmp_path, attempt="a2e1")
        restored.restore([state])
        assert topics.numbers() == [1, 2, 3]

    def test_a_zombie_of_an_older_attempt_cannot_commit_after_the_new_one_started(
            self, topics: Topics, tmp_path: Path) -> None:
        zombie = topics.writer(tmp_path)
        zombie.write(records(1))
        first = zombie.snapshot(1)
        zombie.notify_complete(1)          # its producer has sent before, as in a real run
        zombie.write(records(2))
        zombie.snapshot(2)                 # checkpoint 2 never completes in the store

        current = topics.writer(tmp_path, attempt="a2e1")
        current.restore([first])           # the new attempt restores checkpoint 1
        with pytest.raises(SinkFencedError):
            zombie.notify_complete(2)      # the old driver's late completion
        assert topics.numbers() == [1]


class TestRescales:
    def test_a_removed_subtasks_open_transaction_is_aborted_and_its_interval_sent_once(
            self, topics: Topics, tmp_path: Path) -> None:
        states = []
        for subtask in range(3):
            writer = topics.writer(tmp_path, subtask=subtask, parallelism=3)
            writer.write(records(10 + subtask))
            states.append(writer.snapshot(1))
        topics.leave_open_transaction(subtask=2, checkpoint=1)   # subtask 2 died mid-send

        # 3 -> 2: new subtask 0 owns old 0 and 2, new subtask 1 owns old 1.
        topics.writer(tmp_path, subtask=0, parallelism=2, restored_parallelism=3,
                      attempt="a2e1").restore([states[0], states[2]])
        topics.writer(tmp_path, subtask=1, parallelism=2, restored_parallelism=3,
                      attempt="a2e1").restore([states[1]])
        assert topics.numbers() == [10, 11, 12]

    def test_growing_the_parallelism_sends_each_pending_interval_once(
            self, topics: Topics, tmp_path: Path) -> None:
        states = []
        for subtask in range(2):
            writer = topics.writer(tmp_path, subtask=subtask, parallelism=2)
            writer.write(records(20 + subtask))
            states.append(writer.snapshot(1))
        for subtask in range(3):
            mine = [state for old, state in enumerate(states) if old % 3 == subtask]
            topics.writer(tmp_path, subtask=subtask, parallelism=3, restored_parallelism=2,
                          attempt="a2e1").restore(mine)
        assert topics.numbers() == [20, 21]


class TestBadInput:
    def test_a_topic_that_does_not_exist_is_a_one_line_configuration_error(
            self, kafka_broker: KafkaBroker) -> None:
        topic = f"missing-{uuid.uuid4().hex[:8]}"
        with pytest.raises(ConfigurationError) as raised:
            kafka(topic, kafka_broker.bootstrap).prepare_on_driver(job_id="job-1")
        assert raised.value.describe() == (
            f"sinks.kafka: topic {topic!r} does not exist at {kafka_broker.bootstrap}")

    def test_the_jobs_control_topic_is_created_when_missing(self, topics: Topics) -> None:
        control = f"commits-{uuid.uuid4().hex[:8]}"
        kafka(topics.output, topics.bootstrap, control_topic=control).prepare_on_driver(
            job_id=topics.job)
        assert read_topic(bootstrap=topics.bootstrap,
                          topic=control_topic_of(control, topics.job)) == []

    def test_a_broker_that_does_not_answer_is_a_one_line_configuration_error(self) -> None:
        with pytest.raises(ConfigurationError, match=r"no Kafka broker at 127\.0\.0\.1:9 "):
            kafka("out", "127.0.0.1:9", timeout=2.0).prepare_on_driver(job_id="job-1")

    @pytest.mark.parametrize(("arguments", "problem"), [
        ({"delivery": "twice"}, "delivery must be one of"),
        ({"value_format": "avro"}, "value_format must be 'json'"),
        ({"transaction_timeout": 3600}, "transaction_timeout must be"),
        ({"transaction_timeout": 20, "timeout": 30}, r"transaction_timeout \(20s\) must be "
                                                     r"longer than its timeout \(30s\)"),
        ({"control_topic": "out"}, "control_topic must be"),
        ({"producer_config": {"transactional.id": "mine"}}, "may not set 'transactional.id'"),
    ])
    def test_bad_arguments_are_pipeline_errors_that_say_what_is_wrong(
            self, arguments: dict[str, Any], problem: str) -> None:
        with pytest.raises(PipelineDefinitionError, match=problem):
            kafka("out", "127.0.0.1:9092", **arguments)


def visible(topics: Topics) -> int:
    """How many records a read_committed reader sees; 0 while the broker is away."""
    try:
        return len(read_topic(bootstrap=topics.bootstrap, topic=topics.output, timeout=5.0))
    except (KafkaException, TimeoutError, RuntimeError, ValueError):
        return 0


class TestBrokerRestarts:
    def test_a_broker_crash_during_the_send_delays_the_interval_but_neither_loses_nor_repeats_it(
            self, kafka_broker: KafkaBroker, topics: Topics, tmp_path: Path) -> None:
        count = 20_000
        writer = topics.writer(tmp_path)
        writer.write(records(*range(count)))
        writer.snapshot(1)

        def send_until_visible() -> None:
            checkpoint = 1
            deadline = time.monotonic() + 120
            while True:
                writer.notify_complete(checkpoint)   # a failed send waits for the next one
                if visible(topics) >= count or time.monotonic() > deadline:
                    return
                checkpoint += 1
                writer.snapshot(checkpoint)
                time.sleep(1.0)

        sender = threading.Thread(target=send_until_visible)
        sender.start()
        try:
            # From this thread: the broker dies with the thread that started it.
            time.sleep(0.3)
            kafka_broker.stop(grace=0)
            time.sleep(2.0)
        finally:
            kafka_broker.start()
            sender.join()
        assert topics.numbers() == list(range(count))
