"""A record the broker will never take, against the real broker: it fails the attempt in
one line, or goes to the dead-letter topic, and nothing is left holding readers.

Before this, one such record (larger than ``message.max.bytes``, or a value the
encoder cannot write) was retried at every checkpoint forever while later intervals
queued behind it, and the transaction it was sent in stayed open, holding every
``read_committed`` reader of the topic at its first record.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from e2e.kafka import KafkaBroker, create_topic
from e2e.kafka.clients import read_topic, transactional_producer
from job_runtime.errors import PipelineDefinitionError
from job_runtime.records import Batch
from job_runtime.sinks import kafka
from job_runtime.sinks.commit import CommitRetry
from job_runtime.sinks.failures import SinkFailedError, SinkFailureKind
from job_runtime.sinks.kafka import KafkaSink
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter

QUICK = CommitRetry(attempts=2, first_delay=0.0, max_delay=0.0)
TOO_LARGE = "x" * 3_000_000
"""Over the client's and the broker's default message size (about 1 MB)."""


class Topics:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.output = create_topic(bootstrap=bootstrap, partitions=1)
        self.control = create_topic(bootstrap=bootstrap, partitions=1,
                                    config={"cleanup.policy": "compact"})
        self.dead_letters = create_topic(bootstrap=bootstrap, partitions=1)
        self.job = f"job-{uuid.uuid4().hex[:8]}"

    def sink(self, **kwargs: Any) -> KafkaSink:
        return kafka(self.output, self.bootstrap, key="user", control_topic=self.control,
                     commit_retry=QUICK, timeout=20.0, **kwargs)

    def writer(self, staging: Path, **kwargs: Any) -> SinkWriter:
        return self.sink(**kwargs).open(context=SinkContext(
            subtask=0, parallelism=1, attempt_tag="a1e1", job_id=self.job,
            staging_root=str(staging)))

    def numbers(self) -> list[int]:
        return sorted(json.loads(r.value or b"")["n"]
                      for r in read_topic(bootstrap=self.bootstrap, topic=self.output))

    def probe_is_visible(self) -> bool:
        """Whether a record another producer commits after the failure reaches a
        ``read_committed`` reader: not when a transaction before it is still open."""
        probe = transactional_producer(bootstrap=self.bootstrap,
                                       transactional_id=f"probe-{uuid.uuid4().hex[:8]}")
        probe.begin_transaction()
        probe.produce(self.output, value=json.dumps({"n": -1, "user": "probe"}).encode())
        probe.commit_transaction(20)
        return -1 in self.numbers()


@pytest.fixture
def topics(kafka_broker: KafkaBroker) -> Topics:
    return Topics(kafka_broker.bootstrap)


def records(*numbers: int) -> Batch:
    return Batch(rows=[{"n": n, "user": f"u{n % 3}"} for n in numbers])


def with_poison(tmp_path: Path, topics: Topics, **kwargs: Any) -> tuple[SinkWriter, Any]:
    """A writer whose interval of checkpoint 1 holds records 1, 2, a record of 3 MB
    (position 2 of the interval) and 4; and checkpoint 1's sink state."""
    writer = topics.writer(tmp_path, **kwargs)
    writer.write(records(1, 2))
    writer.write(Batch(rows=[{"n": 3, "user": "u0", "blob": TOO_LARGE}]))
    writer.write(records(4))
    return writer, writer.snapshot(1)


class TestFailing:
    def test_a_record_over_the_size_limit_fails_in_one_line_naming_the_sink_checkpoint_and_position(
            self, topics: Topics, tmp_path: Path) -> None:
        writer, _ = with_poison(tmp_path, topics)
        with pytest.raises(SinkFailedError) as failed:
            writer.notify_complete(1)
        assert failed.value.kind is SinkFailureKind.REJECTED
        text = str(failed.value)
        assert "\n" not in text
        assert "kafka sink" in text and "checkpoint 1" in text and "record 2" in text
        assert "too large" in text

    def test_nothing_of_the_rejected_interval_is_visible_and_no_reader_is_held(
            self, topics: Topics, tmp_path: Path) -> None:
        writer, _ = with_poison(tmp_path, topics)
        with pytest.raises(SinkFailedError):
            writer.notify_complete(1)
        assert topics.probe_is_visible()
        assert topics.numbers() == [-1]

    def test_the_final_checkpoint_fails_at_once_rather_than_retrying_the_same_record(
            self, topics: Topics, tmp_path: Path) -> None:
        writer, _ = with_poison(tmp_path, topics)
        with pytest.raises(SinkFailedError):
            writer.notify_complete(1, final=True)

    def test_a_restore_that_meets_the_record_again_fails_the_same_way(
            self, topics: Topics, tmp_path: Path) -> None:
        writer = topics.writer(tmp_path)
        writer.write(Batch(rows=[{"n": 3, "user": "u0", "blob": TOO_LARGE}]))
        state = writer.snapshot(1)
        restored = topics.writer(tmp_path)
        with pytest.raises(SinkFailedError) as failed:
            restored.restore([state])
        assert failed.value.kind is SinkFailureKind.REJECTED
        assert topics.probe_is_visible()

    def test_a_value_the_encoder_cannot_write_fails_naming_its_position(
            self, topics: Topics, tmp_path: Path) -> None:
        writer = topics.writer(tmp_path)
        writer.write(records(1))
        far = pa.array([1, 400_000_000_000_000_000], type=pa.timestamp("us"))  # year > 9999
        writer.write(Batch(arrow=pa.RecordBatch.from_arrays(
            [pa.array([2, 3]), pa.array(["u2", "u0"]), far], names=["n", "user", "at"])))
        writer.snapshot(1)
        with pytest.raises(SinkFailedError) as failed:
            writer.notify_complete(1)
        text = str(failed.value)
        assert "record 2" in text and "cannot be encoded" in text
        assert topics.probe_is_visible()


class TestDeadLetters:
    def test_the_rejected_record_goes_to_the_dead_letter_topic_and_the_rest_arrives_once(
            self, topics: Topics, tmp_path: Path) -> None:
        writer, _ = with_poison(tmp_path, topics, bad_records="dead-letter",
                             dead_letter_topic=topics.dead_letters)
        writer.notify_complete(1)
        writer.write(records(5))
        writer.snapshot(2)
        writer.notify_complete(2)
        assert topics.numbers() == [1, 2, 4, 5]
        [letter] = read_topic(bootstrap=topics.bootstrap, topic=topics.dead_letters)
        headers = dict(letter.headers or [])
        assert headers["cjob.error"].decode().startswith("the record is too large")
        assert headers["cjob.checkpoint"] == b"1"
        assert headers["cjob.position"] == b"2"
        assert headers["cjob.topic"] == topics.output.encode()
        assert letter.key == b"u0"

    def test_a_dead_letter_that_is_itself_too_large_keeps_its_key_and_says_its_size(
            self, topics: Topics, tmp_path: Path) -> None:
        writer, _ = with_poison(tmp_path, topics, bad_records="dead-letter",
                             dead_letter_topic=topics.dead_letters)
        writer.notify_complete(1)
        [letter] = read_topic(bootstrap=topics.bootstrap, topic=topics.dead_letters)
        headers = dict(letter.headers or [])
        assert letter.value is None
        assert int(headers["cjob.value-bytes"]) > len(TOO_LARGE)

    def test_a_restore_after_a_crash_sends_neither_the_records_nor_the_dead_letter_twice(
            self, topics: Topics, tmp_path: Path) -> None:
        writer, state = with_poison(tmp_path, topics, bad_records="dead-letter",
                             dead_letter_topic=topics.dead_letters)
        writer.notify_complete(1)
        restored = topics.writer(tmp_path, bad_records="dead-letter",
                                 dead_letter_topic=topics.dead_letters)
        restored.restore([state])
        assert topics.numbers() == [1, 2, 4]
        assert len(read_topic(bootstrap=topics.bootstrap, topic=topics.dead_letters)) == 1

    def test_bad_arguments_say_what_is_wrong(self, topics: Topics) -> None:
        with pytest.raises(PipelineDefinitionError, match="dead_letter_topic"):
            topics.sink(bad_records="dead-letter")
        with pytest.raises(PipelineDefinitionError, match="bad_records"):
            topics.sink(bad_records="skip")
        with pytest.raises(PipelineDefinitionError, match="dead_letter_topic"):
            topics.sink(bad_records="dead-letter", dead_letter_topic=topics.output)
        with pytest.raises(PipelineDefinitionError, match="at-least-once"):
            topics.sink(bad_records="dead-letter", dead_letter_topic=topics.dead_letters,
                        delivery="at-least-once")


class TestAtLeastOnce:
    def test_a_record_the_broker_refuses_fails_at_once_naming_its_position(
            self, topics: Topics) -> None:
        writer = topics.sink(delivery="at-least-once").open(context=SinkContext(
            subtask=0, parallelism=1, attempt_tag="a1e1", job_id=topics.job))
        writer.write(records(1, 2))
        writer.snapshot(1)
        writer.write(records(3))
        with pytest.raises(SinkFailedError) as failed:
            writer.write(Batch(rows=[{"n": 4, "user": "u1", "blob": TOO_LARGE}]))
        assert failed.value.kind is SinkFailureKind.REJECTED
        assert "interval of checkpoint 2" in str(failed.value)
        assert "record 1 of the interval" in str(failed.value)
