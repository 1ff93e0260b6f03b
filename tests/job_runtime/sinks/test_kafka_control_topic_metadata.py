"""Whether a Kafka sink may read its control topic, from the topic's metadata: a topic
that does not exist holds no markers, but one that exists and cannot be read now (a
broker just back, a partition without a leader) holds markers nobody can see yet,
and reading none there would call intervals that were sent lost.

Built from the client's own metadata classes; the Kafka tier runs the real reads.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import PartitionMetadata, TopicMetadata

from job_runtime.sinks.kafka.markers import ControlTopicUnavailable, topic_readable

TOPIC = "clicks.job-1"


def metadata(*, error: int | None = None, partition_errors: tuple[int | None, ...] = (None,),
             ) -> TopicMetadata:
    described = TopicMetadata()
    described.topic = TOPIC
    described.error = None if error is None else KafkaError(error)
    for number, partition_error in enumerate(partition_errors):
        partition = PartitionMetadata()
        partition.id = number
        partition.error = None if partition_error is None else KafkaError(partition_error)
        described.partitions[number] = partition
    return described


def test_a_topic_without_errors_is_read() -> None:
    assert topic_readable(metadata(), topic=TOPIC) is True


@pytest.mark.parametrize("described", [None, metadata(error=KafkaError.UNKNOWN_TOPIC_OR_PART)],
                         ids=["absent from the answer", "unknown to the broker"])
def test_a_topic_that_does_not_exist_holds_no_markers(described: TopicMetadata | None) -> None:
    assert topic_readable(described, topic=TOPIC) is False


def test_a_topic_the_broker_cannot_serve_now_is_an_error_not_an_empty_topic() -> None:
    with pytest.raises(ControlTopicUnavailable, match=r"clicks\.job-1 cannot be read now"):
        topic_readable(metadata(error=KafkaError.LEADER_NOT_AVAILABLE), topic=TOPIC)


def test_a_partition_without_a_leader_is_an_error_naming_it() -> None:
    with pytest.raises(ControlTopicUnavailable, match=r"partition 1: .*Leader not available"):
        topic_readable(metadata(partition_errors=(None, KafkaError.LEADER_NOT_AVAILABLE)),
                       topic=TOPIC)
