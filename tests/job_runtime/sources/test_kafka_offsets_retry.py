"""The Kafka source's offset lookup while partition leadership moves.

A topic created a moment ago, or a broker restarting, answers an offset request with
"not leader for partition" until the leader is known: the source asks again until its
timeout instead of failing the job's start. The admin client is a stand-in here because
a broker cannot be made to answer that on demand; the real broker's tests run the same
lookup against fresh topics.
"""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from job_runtime import sources
from job_runtime.errors import ConfigurationError
from job_runtime.sources.kafka import KafkaSource


class FlakyAdmin:
    """Answers each partition's offset request with the errors queued for it, then 42."""

    def __init__(self, errors: dict[int, list[int]]) -> None:
        self.errors = errors
        self.requests: list[list[int]] = []

    def list_offsets(self, requests: dict[TopicPartition, Any], **_: Any) -> dict[Any, Future]:
        self.requests.append(sorted(tp.partition for tp in requests))
        futures: dict[Any, Future] = {}
        for tp in requests:
            future: Future = Future()
            queued = self.errors.get(tp.partition, [])
            if queued:
                future.set_exception(KafkaException(KafkaError(queued.pop(0))))
            else:
                future.set_result(SimpleNamespace(offset=42))
            futures[tp] = future
        return futures


def source(*, timeout: float = 5.0) -> KafkaSource:
    built = sources.kafka(["events"], "127.0.0.1:9", timeout=timeout)
    assert isinstance(built, KafkaSource)
    return built


def lookup(admin: FlakyAdmin, *, timeout: float = 5.0) -> dict[tuple[str, int], int]:
    partitions = [TopicPartition("events", p) for p in range(3)]
    return source(timeout=timeout)._brokers().offsets(admin, partitions, spec=object())  # type: ignore[arg-type]


@pytest.mark.parametrize("code", [KafkaError.NOT_LEADER_FOR_PARTITION,
                                  KafkaError.LEADER_NOT_AVAILABLE,
                                  KafkaError.UNKNOWN_TOPIC_OR_PART,
                                  KafkaError.REQUEST_TIMED_OUT])
def test_a_partition_without_a_known_leader_is_asked_again_until_it_answers(code: int) -> None:
    admin = FlakyAdmin({1: [code, code]})

    assert lookup(admin) == {("events", 0): 42, ("events", 1): 42, ("events", 2): 42}
    # Only the partition that failed is asked again.
    assert admin.requests == [[0, 1, 2], [1], [1]]


def test_an_error_that_waiting_cannot_cure_fails_at_once_in_one_line() -> None:
    admin = FlakyAdmin({0: [KafkaError.TOPIC_AUTHORIZATION_FAILED]})

    with pytest.raises(ConfigurationError, match=r"partition 0 .*[Aa]uthoriz") as raised:
        lookup(admin)
    assert len(admin.requests) == 1
    assert "\n" not in str(raised.value)


def test_a_leader_still_missing_at_the_timeout_fails_with_the_brokers_reason() -> None:
    admin = FlakyAdmin({2: [KafkaError.NOT_LEADER_FOR_PARTITION] * 1000})

    with pytest.raises(ConfigurationError, match=r"partition 2 .*Not leader for partition"):
        lookup(admin, timeout=0.5)
    assert len(admin.requests) > 1
