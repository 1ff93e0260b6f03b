"""The Kafka source's dead letters (``bad_records="dead-letter"``): a record whose value
is not one JSON object goes to the dead-letter topic instead of failing the job."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from job_runtime.errors import ConfigurationError
from job_runtime.sources.kafka.client_log import CLIENT_LOG
from job_runtime.sources.kafka.decode import message_headers

if TYPE_CHECKING:
    from confluent_kafka import Message

log = logging.getLogger(__name__)

DEAD_LETTER_HEADERS = ("cjob.error", "cjob.topic", "cjob.partition", "cjob.offset")
"""Headers a dead-lettered record gets beside its own: why, and where it came from."""


class DeadLetters:
    """Records the source could not decode, produced to the dead-letter topic with their
    own key, value and headers, and headers saying why and from where.

    At least once: a restore can repeat a dead letter, never lose one (positions in a
    checkpoint pass a record only once its dead letter was acknowledged).

    ``topic``: the dead-letter topic; ``client_settings``: the source's settings for a
    client that is not its consumer.
    """

    def __init__(self, *, topic: str, client_settings: Mapping[str, Any]) -> None:
        from confluent_kafka import Producer

        self._topic = topic
        self._producer = Producer({**client_settings, "enable.idempotence": True,
                                   "linger.ms": 5, "logger": CLIENT_LOG})
        self._failures: list[str] = []
        self._sent = 0

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self._failures.append(str(error))

    def send(self, message: Message, *, problem: str) -> None:
        headers = [(h["key"], h["value"]) for h in message_headers(message)]
        origin = [problem, message.topic() or "", str(message.partition()),
                  str(message.offset())]
        headers.extend((name, value.encode()) for name, value in
                       zip(DEAD_LETTER_HEADERS, origin, strict=True))
        while True:
            try:
                self._producer.produce(self._topic, key=message.key(), value=message.value(),
                                       headers=headers, on_delivery=self._delivered)
                break
            except BufferError:
                self._producer.poll(0.05)
        self._sent += 1
        log.warning("kafka topic %r partition %s offset %s to the dead-letter topic %r: %s",
                    message.topic(), message.partition(), message.offset(), self._topic,
                    problem)

    def flush(self) -> None:
        if not self._sent:
            return
        left = self._producer.flush(30.0)
        if left or self._failures:
            failures, self._failures = self._failures, []
            raise ConfigurationError(
                setting="sources.kafka",
                problem=f"{left or len(failures)} records could not be written to the "
                        f"dead-letter topic {self._topic!r}: {failures[:3] or 'timed out'}")
        self._sent = 0
