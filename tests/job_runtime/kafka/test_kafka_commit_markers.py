"""Commit markers that isolate jobs, against the real broker.

Every job used to share one control topic, read whole and ``read_committed`` at each
restore: another job's open transaction held the read until it timed out, the read
cost grew with every job's traffic, and anyone who could write the topic could write
a marker that made a job skip output it never sent. Now each job has a topic of its
own, compacted, and a marker counts only when it proves it was written by the job
that staged the interval.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from e2e.kafka import KafkaBroker, create_topic
from e2e.kafka.clients import read_topic, transactional_producer
from job_runtime.errors import ConfigurationError
from job_runtime.records import Batch
from job_runtime.sinks import kafka
from job_runtime.sinks.commit import CommitRetry
from job_runtime.sinks.kafka import CommitMarker, KafkaSink, control_topic_of
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter

QUICK = CommitRetry(attempts=2, first_delay=0.0, max_delay=0.0)


class Topics:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.output = create_topic(bootstrap=bootstrap, partitions=1)
        self.base = f"commits-{uuid.uuid4().hex[:8]}"
        self.job = f"job-{uuid.uuid4().hex[:8]}"

    def sink(self, **kwargs: Any) -> KafkaSink:
        return kafka(self.output, self.bootstrap, key="user", control_topic=self.base,
                     commit_retry=QUICK, timeout=20.0, **kwargs)

    def writer(self, staging: Path, *, job: str | None = None, attempt: str = "a1e1",
               restored_job: str = "") -> SinkWriter:
        sink = self.sink()
        sink.prepare_on_driver(job_id=job or self.job)
        return sink.open(context=SinkContext(
            subtask=0, parallelism=1, attempt_tag=attempt, job_id=job or self.job,
            staging_root=str(staging), restored_job=restored_job))

    @property
    def own(self) -> str:
        return control_topic_of(self.base, self.job)

    def numbers(self) -> list[int]:
        return sorted(json.loads(r.value or b"")["n"]
                      for r in read_topic(bootstrap=self.bootstrap, topic=self.output))


@pytest.fixture
def topics(kafka_broker: KafkaBroker) -> Topics:
    return Topics(kafka_broker.bootstrap)


def records(*numbers: int) -> Batch:
    return Batch(rows=[{"n": n, "user": f"u{n % 3}"} for n in numbers])


class TestIsolation:
    def test_each_job_writes_its_markers_to_a_compacted_topic_of_its_own(
            self, topics: Topics, tmp_path: Path) -> None:
        for job in (topics.job, f"other-{uuid.uuid4().hex[:8]}"):
            writer = topics.writer(tmp_path / job, job=job)
            writer.write(records(1))
            writer.snapshot(1)
            writer.notify_complete(1)
        markers = [json.loads(r.value or b"") for r in
                   read_topic(bootstrap=topics.bootstrap, topic=topics.own)]
        assert [(m["job"], m["subtask"], m["checkpoint"]) for m in markers] == [
            (topics.job, 0, 1)]

    def test_another_jobs_open_transaction_does_not_hold_this_jobs_restore(
            self, topics: Topics, tmp_path: Path) -> None:
        writer = topics.writer(tmp_path)
        writer.write(records(1, 2))
        state = writer.snapshot(1)
        writer.notify_complete(1)
        other = f"other-{uuid.uuid4().hex[:8]}"
        topics.writer(tmp_path / "other", job=other)    # its control topic exists
        for topic in (topics.base, control_topic_of(topics.base, other)):
            if topic == topics.base:
                create_topic(bootstrap=topics.bootstrap, partitions=1, name=topic,
                             config={"cleanup.policy": "compact"})
            holder = transactional_producer(bootstrap=topics.bootstrap,
                                            transactional_id=f"holder-{uuid.uuid4().hex[:8]}",
                                            config={"transaction.timeout.ms": 600_000})
            holder.begin_transaction()
            holder.produce(topic, key=b"x", value=b"{}")
            holder.flush(10)

        started = time.monotonic()
        topics.writer(tmp_path, attempt="a2e1").restore([state])
        assert time.monotonic() - started < 20, "the restore waited for another job"
        assert topics.numbers() == [1, 2]

    def test_thousands_of_markers_of_other_jobs_never_reach_this_jobs_topic(
            self, topics: Topics, tmp_path: Path) -> None:
        producer = Producer({"bootstrap.servers": topics.bootstrap})
        others = [f"other-{n}-{uuid.uuid4().hex[:6]}" for n in range(5)]
        for other in others:
            topics.writer(tmp_path / other, job=other)
            for checkpoint in range(1, 1001):
                marker = CommitMarker(job=other, subtask=checkpoint % 4, checkpoint=checkpoint)
                producer.produce(control_topic_of(topics.base, other), key=marker.key,
                                 value=json.dumps({"version": 1, "job": other,
                                                   "subtask": checkpoint % 4,
                                                   "checkpoint": checkpoint}).encode())
        producer.flush(30)
        writer = topics.writer(tmp_path)
        writer.write(records(7))
        state = writer.snapshot(1)
        topics.writer(tmp_path, attempt="a2e1").restore([state])
        assert topics.numbers() == [7]
        assert len(read_topic(bootstrap=topics.bootstrap, topic=topics.own)) == 1


class TestForgedMarkers:
    @pytest.mark.parametrize("forged", [
        {"version": 1},
        {"version": 2, "writer": "cjob-{job}-0", "mac": "00" * 32},
        {"version": 2, "writer": "cjob-{job}-0",
         "mac": "guess"},
    ], ids=["an old marker", "a wrong proof", "no proof"])
    def test_a_marker_without_the_jobs_proof_is_ignored_and_the_interval_sent_once(
            self, topics: Topics, tmp_path: Path, forged: dict[str, Any]) -> None:
        writer = topics.writer(tmp_path)
        writer.write(records(1, 2))
        state = writer.snapshot(1)
        marker = {"job": topics.job, "subtask": 0, "checkpoint": 99, **forged}
        if "writer" in marker:
            marker["writer"] = marker["writer"].format(job=topics.job)
        producer = Producer({"bootstrap.servers": topics.bootstrap})
        producer.produce(topics.own, key=f"{topics.job}/0".encode(),
                         value=json.dumps(marker).encode())
        producer.flush(10)

        topics.writer(tmp_path, attempt="a2e1").restore([state])
        assert topics.numbers() == [1, 2]

    def test_a_marker_proven_with_a_key_of_another_lineage_is_ignored(
            self, topics: Topics, tmp_path: Path) -> None:
        writer = topics.writer(tmp_path)
        writer.write(records(3))
        state = writer.snapshot(1)
        key = b"k" * 16
        writer_id = f"cjob-{topics.job}-0"
        proof = hmac.new(key, f"{topics.job}|0|99|{writer_id}".encode(),
                         hashlib.sha256).hexdigest()
        producer = Producer({"bootstrap.servers": topics.bootstrap})
        producer.produce(topics.own, key=f"{topics.job}/0".encode(), value=json.dumps(
            {"version": 2, "job": topics.job, "subtask": 0, "checkpoint": 99,
             "writer": writer_id, "mac": proof}).encode())
        producer.flush(10)

        topics.writer(tmp_path, attempt="a2e1").restore([state])
        assert topics.numbers() == [3]


class TestTheControlTopic:
    def test_a_control_topic_that_deletes_old_records_is_a_one_line_configuration_error(
            self, topics: Topics) -> None:
        create_topic(bootstrap=topics.bootstrap, partitions=1, name=topics.own,
                     config={"cleanup.policy": "delete"})
        with pytest.raises(ConfigurationError) as raised:
            topics.sink().prepare_on_driver(job_id=topics.job)
        text = raised.value.describe()
        assert topics.own in text and "cleanup.policy" in text and "compact" in text
        assert "\n" not in text

    def test_a_long_job_name_still_gives_a_valid_topic_name_of_its_own(self) -> None:
        long_job = "a" * 240 + "-" + str(uuid.uuid4())
        name = control_topic_of("cjob-commits", long_job)
        assert len(name) <= 249 and name.startswith("cjob-commits.")
        assert name != control_topic_of("cjob-commits", long_job[:-1] + "x")
        assert control_topic_of("cjob-commits", "clicks-1b2c.late/out") == \
            "cjob-commits.clicks-1b2c.late_out"


class TestUpgradedJobs:
    def test_an_interval_staged_before_per_job_topics_is_looked_up_in_the_shared_topic(
            self, topics: Topics, tmp_path: Path) -> None:
        """A checkpoint of an older release lists intervals without a key; their markers
        are in the shared topic, as that release wrote them."""
        writer = topics.writer(tmp_path)
        writer.write(records(4, 5))
        [entry] = writer.snapshot(1)
        legacy = {key: value for key, value in entry.items() if key != "key"}
        legacy["version"] = 2
        create_topic(bootstrap=topics.bootstrap, partitions=1, name=topics.base,
                     config={"cleanup.policy": "compact"})
        sent = transactional_producer(bootstrap=topics.bootstrap,
                                      transactional_id=f"cjob-{topics.job}-0")
        sent.begin_transaction()
        for n in (4, 5):
            sent.produce(topics.output, value=json.dumps({"n": n, "user": "u"}).encode())
        sent.produce(topics.base, key=f"{topics.job}/0".encode(), value=json.dumps(
            {"version": 1, "job": topics.job, "subtask": 0, "checkpoint": 1}).encode())
        sent.commit_transaction(20)

        topics.writer(tmp_path, attempt="a2e1").restore([[legacy]])
        assert topics.numbers() == [4, 5]
