"""The Kafka source's split reader: one consumer assigned one partition, read from a
position (the next offset, with the bounded end beside it) that the checkpoint keeps.

The reader knows nothing of the source that opens it: it is given the consumer's
settings, a decoder for its records, and what to do with a record that cannot be
decoded, so the source can import it and not the other way round.
"""

from __future__ import annotations

import itertools
import logging
import operator
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from job_runtime.errors import UserCodeError, client_error_text
from job_runtime.records import Batch
from job_runtime.sources.kafka.dead_letters import DeadLetters
from job_runtime.sources.kafka.decode import RecordDecoder, json_object_problem
from job_runtime.sources.kafka.plan import KafkaPartition
from job_runtime.sources.kafka.positions import KafkaPosition
from job_runtime.sources.source_contract import SourceBacklog, SplitReader

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Message

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05
"""How long one read waits for records before it returns an empty batch: the source
task handles checkpoint triggers between reads, so this bounds how long a quiet
partition holds a barrier back."""
_WARN_EVERY = 30.0


class KafkaReader(SplitReader):
    """Reads partition ``part`` from ``offset`` (up to ``end``, bounded).

    ``consumer_settings``: the consumer's; ``decoder``: the records as columns;
    ``dead_letters``: makes the dead-letter producer at the first record that cannot
    be decoded (``None``: such a record fails the job); ``commit_offsets``: copy a
    completed checkpoint's offset to the consumer group.
    """

    def __init__(self, *, part: KafkaPartition, offset: int, end: int | None,
                 batch_size: int, consumer_settings: Mapping[str, Any],
                 decoder: RecordDecoder, dead_letters: Callable[[], DeadLetters] | None,
                 commit_offsets: bool) -> None:
        self._consumer_settings = dict(consumer_settings)
        self._decoder = decoder
        self._new_dead_letters = dead_letters
        self._commit_offsets = commit_offsets
        self._part = part
        self._next = offset
        self._end = end
        self._batch_size = batch_size
        self._consumer: Consumer | None = None
        self._warned_at = 0.0
        self._dead_letters: DeadLetters | None = None
        if not self._ended():
            # Assigned now, not at the first read: the client starts fetching at once,
            # so the partition's end (its backlog) is known while the subtask still
            # works through another partition's batch, which can take long.
            self._open()

    def _ended(self) -> bool:
        return self._end is not None and self._next >= self._end

    def _open(self) -> Consumer:
        if self._consumer is None:
            from confluent_kafka import Consumer, TopicPartition

            consumer = Consumer(self._consumer_settings)
            consumer.assign([TopicPartition(self._part.topic, self._part.partition, self._next)])
            self._consumer = consumer
        return self._consumer

    def read_batch(self) -> Batch | None:
        if self._ended():
            return None
        messages = self._open().consume(num_messages=self._batch_size, timeout=POLL_SECONDS)
        if not messages:
            return None if self._ended() else Batch(rows=[])
        # Method calls in list comprehensions and C-level checks: a batch of thousands
        # of messages is looked at per message only when it holds an error (the end of
        # the partition), an offset already read, or the bounded end.
        offsets = [m.offset() for m in messages]
        errors = [m.error() for m in messages]
        # (``is not``: a KafkaError cannot be compared with None.) Only a message that
        # is an error has no offset.
        if not any(map(operator.is_not, errors, itertools.repeat(None))):
            read = cast("list[int]", offsets)
            if read[0] >= self._next and (self._end is None or read[-1] < self._end):
                self._next = read[-1] + 1
                kept, kept_offsets = messages, read
            else:
                kept, kept_offsets = self._keep(messages, offsets, errors)
        else:
            kept, kept_offsets = self._keep(messages, offsets, errors)
        if kept:
            arrow = self._decode(kept, kept_offsets)
            if arrow is not None:
                return Batch(arrow=arrow)
        return None if self._ended() else Batch(rows=[])

    def _keep(self, messages: list[Message], offsets: list[int | None],
              errors: list[KafkaError | None]) -> tuple[list[Message], list[int]]:
        """The messages to emit, one by one: errors handled, offsets already read and
        offsets at or past the bounded end left out."""
        kept: list[Message] = []
        kept_offsets: list[int] = []
        for message, offset, error in zip(messages, offsets, errors, strict=True):
            if error is not None:
                self._on_error(error, message)
                continue
            if offset is None or offset < self._next:
                continue
            if self._end is not None and offset >= self._end:
                # Everything before the end was delivered before this record.
                self._next = self._end
                break
            kept.append(message)
            kept_offsets.append(offset)
            self._next = offset + 1
        return kept, kept_offsets

    def _decode(self, messages: list[Message], offsets: list[int]) -> pa.RecordBatch | None:
        """The messages as columns; with ``bad_records="dead-letter"`` a value that is
        not one JSON object goes to the dead-letter topic instead of failing the job."""
        try:
            return self._decoder.to_arrow(messages, offsets=offsets)
        except UserCodeError:
            if self._new_dead_letters is None:
                raise
        good: list[Message] = []
        good_offsets: list[int] = []
        for message, offset in zip(messages, offsets, strict=True):
            problem = json_object_problem(message.value())
            if problem is None:
                good.append(message)
                good_offsets.append(offset)
            else:
                if self._dead_letters is None:
                    self._dead_letters = self._new_dead_letters()
                self._dead_letters.send(message, problem=problem)
        if not good:
            return None
        # Values that are each an object yet cannot share columns still fail the job.
        return self._decoder.to_arrow(good, offsets=good_offsets)

    def _on_error(self, error: KafkaError, message: Message) -> None:
        from confluent_kafka import KafkaError

        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            # The consumer reached the partition's end (for read_committed its last
            # stable offset), past control records and aborted transactions, which
            # are never delivered: the position moves past them too.
            offset = message.offset()
            if offset is not None:
                reached = offset if self._end is None else min(offset, self._end)
                self._next = max(self._next, reached)
            return
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            raise self._decoder.error(
                self._next,
                problem="the offset is no longer on the broker (deleted by retention, or "
                        f"the topic was recreated): {error.str()}")
        if error.fatal() or code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                                     KafkaError._UNKNOWN_PARTITION,
                                     KafkaError.TOPIC_AUTHORIZATION_FAILED):
            raise self._decoder.error(self._next, problem=error.str())
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY:
            self._warned_at = now
            log.warning("kafka topic %r partition %d: %s (the client retries)",
                        self._part.topic, self._part.partition, error.str())

    def position(self) -> dict[str, Any]:
        if self._dead_letters is not None:
            # A checkpoint's position must not pass a record whose dead letter could
            # still be lost: the records before it are all acknowledged.
            self._dead_letters.flush()
        return KafkaPosition(topic=self._part.topic, partition=self._part.partition,
                             offset=self._next, end=self._end,
                             cluster=self._part.cluster).to_json()

    def checkpoint_completed(self, position: Any) -> None:
        """Commits the completed checkpoint's offset to the job's consumer group, in the
        background: a copy for lag monitors (``kafka-consumer-groups --describe``). A
        restore never reads it, and a commit that fails is only logged."""
        from confluent_kafka import KafkaException, TopicPartition

        consumer = self._consumer
        if consumer is None or not self._commit_offsets or not isinstance(position, dict):
            return
        if int(position["offset"]) < 0:
            return  # nothing read of the partition yet
        try:
            consumer.commit(offsets=[TopicPartition(self._part.topic, self._part.partition,
                                                    int(position["offset"]))],
                            asynchronous=True)
        except KafkaException as exc:
            now = time.monotonic()
            if now - self._warned_at >= _WARN_EVERY:
                self._warned_at = now
                log.warning("kafka topic %r partition %d: committing the checkpoint's offset "
                            "to the consumer group failed: %s", self._part.topic,
                            self._part.partition, client_error_text(exc))

    def backlog(self) -> SourceBacklog | None:
        """The consumer's lag: the high watermark its last fetch saw, minus the next
        offset (no request to the broker: the client's cached value)."""
        from confluent_kafka import TopicPartition

        consumer = self._consumer
        if consumer is None or self._next < 0:
            return None
        try:
            _, high = consumer.get_watermark_offsets(
                TopicPartition(self._part.topic, self._part.partition), cached=True)
        except Exception:  # closed meanwhile, or nothing fetched yet
            return None
        if high is None or high < 0:
            return None
        end = high if self._end is None else min(high, self._end)
        return SourceBacklog(topic=self._part.topic, partition=self._part.partition,
                             records=max(0, end - self._next))

    def close(self) -> None:
        if self._dead_letters is not None:
            self._dead_letters.flush()
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()
