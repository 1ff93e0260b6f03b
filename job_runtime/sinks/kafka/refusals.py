"""Which broker errors mean a record will never be accepted, producing one record,
and the dead letter a refused record becomes.

A refusal for good (too large, an invalid record) fails the job in one line or routes
the record to the dead-letter topic; anything else may pass and is retried.
"""

from __future__ import annotations

import dataclasses
from typing import Any

DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
"""The producer's default ``message.max.bytes``: a larger record never leaves it."""


EncodedRecord = tuple[bytes | None, bytes, str | None]
"""A record as key and value bytes, and why the broker would refuse it (``None``: it
would not, as far as the sink can tell before sending)."""


def permanent(error: Any) -> bool:
    """Whether the broker (or the client, before sending) refuses a record for good."""
    from confluent_kafka import KafkaError

    return bool(error.code() in (*_too_large_codes(), KafkaError.INVALID_RECORD,
                                 KafkaError.INVALID_MSG))


def _too_large_codes() -> tuple[int, ...]:
    from confluent_kafka import KafkaError

    return (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE,
            KafkaError.INVALID_MSG_SIZE)


def refusal(error: Any) -> str:
    """Why a record was refused, as the dead letter's ``cjob.error`` says it."""
    if error.code() in _too_large_codes():
        return f"the record is too large for the broker ({error.str()})"
    return f"the broker refused the record ({error.str()})"


def produce(producer: Any, *, topic: str, key: bytes | None, value: bytes | None,
             on_delivery: Any = None, headers: list[tuple[str, bytes]] | None = None) -> None:
    while True:
        try:
            if headers:
                producer.produce(topic, value=value, key=key, on_delivery=on_delivery,
                                 headers=headers)
            else:
                producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
            return
        except BufferError:  # the local queue is full: let deliveries make room
            producer.poll(0.05)


DEAD_LETTER_HEADERS = ("cjob.error", "cjob.topic", "cjob.checkpoint", "cjob.subtask",
                       "cjob.position", "cjob.value-bytes")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeadLetter:
    """A refused record as it goes to the dead-letter topic: its own key, its value if
    the topic can hold it, and headers that say why and from where."""

    topic: str
    value: bytes | None
    headers: list[tuple[str, bytes]]
