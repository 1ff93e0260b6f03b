"""What ``sources.kafka`` refuses when the pipeline is built, before any broker is asked."""

from __future__ import annotations

from typing import Any

import pytest

from job_runtime import sources
from job_runtime.errors import PipelineDefinitionError
from job_runtime.sources.kafka import KafkaSource


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"start": "beginning"}, "start must be 'earliest', 'latest' or a time"),
    ({"start": -1}, "start must be"),
    ({"start": True}, "start must be"),
    ({"value_format": "avro"}, "value_format must be one of raw, json"),
    ({"batch_size": 0}, "batch_size must be a positive number"),
    ({"timeout": 0}, "timeout must be a positive number"),
    ({"consumer_config": {"isolation.level": "read_uncommitted"}},
     "may not set 'isolation.level': the source reads committed records only"),
    ({"consumer_config": {"enable.auto.commit": True}}, "may not set 'enable.auto.commit'"),
    ({"consumer_config": {"auto.offset.reset": "latest"}}, "may not set 'auto.offset.reset'"),
    ({"consumer_config": {"bootstrap.servers": "elsewhere:9092"}},
     "may not set 'bootstrap.servers'"),
    ({"bad_records": "skip"}, "bad_records must be one of fail, dead-letter"),
    ({"bad_records": "dead-letter", "value_format": "json"}, "needs a dead_letter_topic"),
    ({"bad_records": "dead-letter", "dead_letter_topic": "bad"}, "needs value_format='json'"),
    ({"dead_letter_topic": "bad", "value_format": "json"},
     "dead_letter_topic is used only with bad_records='dead-letter'"),
    ({"bad_records": "dead-letter", "dead_letter_topic": "events", "value_format": "json"},
     "must not be one of the topics it reads"),
])
def test_invalid_arguments_are_one_line_when_the_pipeline_is_built(
        kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(PipelineDefinitionError) as raised:
        sources.kafka("events", "127.0.0.1:9092", **kwargs)
    message = str(raised.value)
    assert says in message
    assert "\n" not in message


@pytest.mark.parametrize("topics", [[], "", [""]])
def test_a_source_without_topic_names_is_refused(topics: Any) -> None:
    with pytest.raises(PipelineDefinitionError, match="one or more topic names"):
        sources.kafka(topics, "127.0.0.1:9092")


def test_a_source_without_a_bootstrap_address_is_refused() -> None:
    with pytest.raises(PipelineDefinitionError, match="bootstrap address"):
        sources.kafka("events", " ")


def test_valid_arguments_build_a_source_that_keeps_the_topics_order_without_repeats() -> None:
    source = sources.kafka(["b", "a", "b"], "127.0.0.1:9092", start=1_700_000_000_000,
                           bounded=True, value_format="json", batch_size=10,
                           consumer_config={"fetch.min.bytes": 1, "group.id": "mine"})
    assert isinstance(source, KafkaSource)
    assert source.topics == ["b", "a"]
    settings = source.consumer_settings()
    assert settings["group.id"] == "mine"
    assert settings["isolation.level"] == "read_committed"
    assert settings["enable.auto.commit"] is False
    assert settings["fetch.min.bytes"] == 1


def test_the_missing_timestamp_constant_is_the_clients_own() -> None:
    import confluent_kafka

    from job_runtime.sources.kafka import TIMESTAMP_NOT_AVAILABLE

    assert TIMESTAMP_NOT_AVAILABLE == confluent_kafka.TIMESTAMP_NOT_AVAILABLE
