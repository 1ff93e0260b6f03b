"""``kafka``: the records of Kafka topics, one split per partition, offsets in the checkpoint.

**The plan.** Which partitions the job reads, and from which offset (and, bounded, up
to which), is decided once, at the job's first start: the driver reads the topics'
metadata and offsets and stages them as a *plan* under the job's staging area
(``<staging>/kafka/plan-<digest>.json``, the digest of ``bootstrap``, ``topics``,
``start`` and ``bounded``: two inputs of a union that read one topic name at two
clusters never share a plan), with the cluster's id. Every later attempt and every
subtask reads that file, so split ``s`` is the same partition in every process (the
topics in the order given, each one's partitions in ascending order),
``start="latest"`` means the end at the job's first start, and a bounded job's end
never moves, whatever restarts. A subtask that finds no plan (only a warm standby
whose job never started) makes one from the brokers itself, which keeps each
partition with one reader.

**Positions say what they are.** A checkpoint keeps each partition's position as its
cluster, topic, partition and next offset, also for a partition not read yet, never
as a bare index. A restore matches positions to partitions by what they are
(:meth:`KafkaSource.restore_splits`), so a new plan (``topics`` added, removed or
reordered, ``start`` or ``bounded`` changed) continues every partition the checkpoint
knows from its offset, once, whatever index the plan gives it; a partition of a topic
the checkpoint read but does not hold (added since) is read from its beginning, one
of a topic new to the job from ``start``; positions of topics the job no longer reads
are dropped with a warning, and one of another cluster is refused.

**Partitions added while the job runs** are found every ``partition_discovery``
seconds (unbounded sources only, by a thread beside the source task:
:mod:`job_runtime.execution.subtask.split_discovery`) and read from their earliest
offset. Such a partition is split ``(t + 1) * 1,000,000 + partition`` (``t`` the
topic's place in ``topics``), so every subtask assigns it alike whenever it sees it;
its position is checkpointed like the plan's, and a restore rebuilds it from that
position before reading anything. An unbounded source never ends: a subtask that
holds no partition (more subtasks than partitions) waits, idle, for one to be added.

**Reading.** Each reader has its own consumer, assigned its one partition
(``assign()``: never a consumer group's subscription or rebalancing), with
``isolation.level=read_committed``. A reader's position is the
next offset of its partition, with the bounded end beside it; only a split without a
position starts at the plan's start offset. When a checkpoint completes, its offsets
are copied to the consumer group ``cjob-<job id>`` for lag monitors; a restore never
reads them: the checkpoint is the only record.

**Unbounded** readers return an empty batch when nothing arrived within
:data:`POLL_SECONDS`, so an idle partition never holds a barrier back, and never
end. A subtask keeps a reader of each of its partitions open and reads them in turn
(``reads_splits_together``), so any number of partitions works with any parallelism;
an idle partition costs its turn :data:`POLL_SECONDS` of waiting. **Bounded** readers
end at the plan's end
offset (the last stable offset at the first start); a partition whose end is its start
ends at once.

Errors a user makes are one line: at the driver, before the job runs, an unknown
topic or brokers that do not answer within ``timeout`` (a
:class:`~job_runtime.errors.ConfigurationError`); in a subtask, a value that is not
a JSON object with ``value_format="json"``, an offset no longer on the broker or a
topic deleted while the job reads it (a :class:`~job_runtime.errors.UserCodeError`
naming topic, partition and offset).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import itertools
import json
import logging
import operator
import time
from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa

from cjob_checkpoint.storage.base import join_uri
from cjob_checkpoint.storage.factory import get_filesystem
from job_runtime.errors import (
    ConfigurationError,
    PipelineDefinitionError,
    UserCodeError,
    client_error_text,
)
from job_runtime.records import Batch
from job_runtime.sources.base import (
    RestoredSplit,
    Source,
    SourceBacklog,
    SourceContext,
    Split,
    SplitReader,
)
from job_runtime.sources.staging import DriverStaging

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._listoffsets import OffsetSpec

    # ClusterMetadata's documented home is confluent_kafka.admin, whose stubs do not
    # re-export it.
    from confluent_kafka.admin._metadata import ClusterMetadata

log = logging.getLogger(__name__)

STARTS = ("earliest", "latest")
VALUE_FORMATS = ("raw", "json")
BAD_RECORDS = ("fail", "dead-letter")
DEAD_LETTER_HEADERS = ("cjob.error", "cjob.topic", "cjob.partition", "cjob.offset")
"""Headers a dead-lettered record gets beside its own: why, and where it came from."""
POLL_SECONDS = 0.05
"""How long one read waits for records before it returns an empty batch: the source
task handles checkpoint triggers between reads, so this bounds how long a quiet
partition holds a barrier back."""
TRANSIENT_ERRORS = frozenset({"NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE",
                              "UNKNOWN_TOPIC_OR_PART", "REQUEST_TIMED_OUT", "_TRANSPORT",
                              "_TIMED_OUT"})
"""Offset-lookup errors that asking again cures: a partition whose leader is not known
yet (a topic just created, a broker restarting) or a request that timed out. The client
does not mark all of them retriable in its admin answers."""
PLAN_VERSION = 2
"""Version 2 adds the cluster's id; version 1 plans are read with none."""
PLAN_VERSIONS = (1, 2)
BEGINNING = -2
"""The client's logical offset of a partition's first record (``OFFSET_BEGINNING``):
where a restored partition of a known topic that the checkpoint does not hold starts,
without asking the broker for its earliest offset."""
GROUP_ID_PREFIX = "cjob-"
"""The consumers' ``group.id`` is this and the job's id unless ``consumer_config``
names one. The consumers are assigned their partitions and never join the group: it
only holds the offsets of completed checkpoints, for monitoring tools."""
DISCOVERED_INDEX_BASE = 1_000_000
"""A partition found while the job runs is split ``(t + 1) * base + partition``, ``t``
the topic's place in ``topics``: an index that depends on what the partition is, not
on when a subtask saw it, far above the plan's (which count from 0)."""
DEFAULT_DISCOVERY_SECONDS = 60.0
CONSUMER_DEFAULTS: Mapping[str, Any] = {
    "fetch.queue.backoff.ms": 10,
    "queued.max.messages.kbytes": 16384,
}
"""Consumer settings the source chooses unless ``consumer_config`` sets them. The
client stops fetching a partition whose prefetch queue is full and by default waits a
whole second before it fetches again: a reader that empties the queue faster than
that (about 130,000 records/s of 70 bytes here) then stalls, and one partition's
reader went from 130,000 to 350,000 records/s with a 10 ms wait. The queue's bytes
(per reader: each partition has its own consumer) are capped at 16 MiB instead of
64 MiB, which the faster refill makes up for."""
METADATA_COLUMNS = ("key", "headers", "timestamp", "partition", "offset", "topic")
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

_OWN_SETTINGS = {
    "bootstrap.servers": "the bootstrap argument gives it",
    "isolation.level": "the source reads committed records only (read_committed)",
    "enable.auto.commit": "the checkpoint holds the offsets and the source commits none",
    "enable.auto.offset.store": "the checkpoint holds the offsets and the source commits none",
    "enable.partition.eof": "the source needs to see where a partition ends",
    "auto.offset.reset": "an offset no longer on the broker fails the job instead of "
                         "skipping or replaying records",
}
_WARN_EVERY = 30.0


class _ClientLog:
    """The clients' own log lines, as warnings at most: what a client retries by itself
    (a broker restarting) is no error of the job."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        self._logger.log(min(level, logging.WARNING), msg, *args)


_CLIENT_LOG = _ClientLog(logging.getLogger(__name__ + ".client"))


@dataclasses.dataclass(frozen=True)
class KafkaPartition:
    """One split: a partition and the offsets the plan fixed at the job's first start."""

    topic: str
    partition: int
    start: int
    """The first offset to read when the checkpoint has no position for the split
    (:data:`BEGINNING`: the partition's first record)."""
    end: int | None
    """Bounded: the offset to stop at (the last stable offset at the first start);
    ``None`` for an unbounded source."""
    cluster: str | None = None
    """The id of the Kafka cluster the partition is at (``None``: not known, a plan
    staged before plans kept it)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class KafkaPosition:
    """Where a reader of one partition continues: the checkpoint's record of a split,
    kept as JSON (``topic``, ``partition``, ``offset``, ``end``, ``cluster``)."""

    topic: str
    partition: int
    offset: int
    end: int | None
    cluster: str | None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"topic": self.topic, "partition": self.partition,
                                    "offset": self.offset, "end": self.end}
        if self.cluster is not None:
            document["cluster"] = self.cluster
        return document

    @classmethod
    def from_json(cls, data: Any) -> KafkaPosition | None:
        """The position, or ``None`` when ``data`` is not a Kafka partition's."""
        if not isinstance(data, dict):
            return None
        try:
            end = data.get("end")
            cluster = data.get("cluster")
            return cls(topic=str(data["topic"]), partition=int(data["partition"]),
                       offset=int(data["offset"]), end=None if end is None else int(end),
                       cluster=None if cluster is None else str(cluster))
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


class _KafkaReader(SplitReader):
    def __init__(self, *, source: KafkaSource, part: KafkaPartition, offset: int,
                 end: int | None, batch_size: int, subtask: int,
                 columns: frozenset[str] | None = None, job_id: str = "") -> None:
        self._source = source
        self._columns = columns
        self._job_id = job_id
        self._part = part
        self._next = offset
        self._end = end
        self._batch_size = batch_size
        self._subtask = subtask
        self._consumer: Consumer | None = None
        self._warned_at = 0.0
        self._dead_letters: _DeadLetters | None = None

    def _ended(self) -> bool:
        return self._end is not None and self._next >= self._end

    def _open(self) -> Consumer:
        if self._consumer is None:
            from confluent_kafka import Consumer, TopicPartition

            consumer = Consumer(self._source.consumer_settings(job_id=self._job_id))
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
        source = self._source
        try:
            return source.to_arrow(messages, part=self._part, subtask=self._subtask,
                                   offsets=offsets, columns=self._columns)
        except UserCodeError:
            if source.bad_records != "dead-letter":
                raise
        good: list[Message] = []
        good_offsets: list[int] = []
        for message, offset in zip(messages, offsets, strict=True):
            problem = _json_object_problem(message.value())
            if problem is None:
                good.append(message)
                good_offsets.append(offset)
            else:
                if self._dead_letters is None:
                    self._dead_letters = _DeadLetters(source=source)
                self._dead_letters.send(message, problem=problem)
        if not good:
            return None
        # Values that are each an object yet cannot share columns still fail the job.
        return source.to_arrow(good, part=self._part, subtask=self._subtask,
                               offsets=good_offsets, columns=self._columns)

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
            raise self._source.user_error(
                self._part, self._next, subtask=self._subtask,
                problem="the offset is no longer on the broker (deleted by retention, or "
                        f"the topic was recreated): {error.str()}")
        if error.fatal() or code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                                     KafkaError._UNKNOWN_PARTITION,
                                     KafkaError.TOPIC_AUTHORIZATION_FAILED):
            raise self._source.user_error(self._part, self._next, subtask=self._subtask,
                                          problem=error.str())
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
        if consumer is None or not self._source.commit_offsets or not isinstance(position, dict):
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


def _json_object_problem(value: bytes | None) -> str | None:
    """Why ``value`` is not one JSON object (``None``: it is, or it is a tombstone)."""
    if value is None:
        return None
    try:
        decoded = json.loads(value)
    except ValueError as exc:
        return f"the value is not valid JSON ({exc})"
    if not isinstance(decoded, dict):
        return f"the value is JSON but not an object ({type(decoded).__name__})"
    return None


class _DeadLetters:
    """Records the source could not decode, produced to the dead-letter topic with their
    own key, value and headers, and headers saying why and from where.

    At least once: a restore can repeat a dead letter, never lose one (positions in a
    checkpoint pass a record only once its dead letter was acknowledged).
    """

    def __init__(self, *, source: KafkaSource) -> None:
        from confluent_kafka import Producer

        assert source.dead_letter_topic is not None
        self._topic = source.dead_letter_topic
        self._producer = Producer({**source.client_settings(), "enable.idempotence": True,
                                   "linger.ms": 5, "logger": _CLIENT_LOG})
        self._failures: list[str] = []
        self._sent = 0

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self._failures.append(str(error))

    def send(self, message: Message, *, problem: str) -> None:
        headers = [(h["key"], h["value"]) for h in _headers(message)]
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


def _transient(exc: BaseException) -> bool:
    """Whether a client error goes away by asking again (leadership still moving)."""
    from confluent_kafka import KafkaError

    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError):
        return False
    return bool(error.retriable()) or error.name() in TRANSIENT_ERRORS


class KafkaSource(Source):
    name = "kafka"

    def __init__(self, *, topics: list[str], bootstrap: str, start: str | int, bounded: bool,
                 value_format: str, batch_size: int | None,
                 consumer_config: Mapping[str, Any], timeout: float, bad_records: str = "fail",
                 dead_letter_topic: str | None = None, commit_offsets: bool = True,
                 partition_discovery: float | None = DEFAULT_DISCOVERY_SECONDS) -> None:
        self.topics = topics
        self.commit_offsets = commit_offsets
        self.partition_discovery = partition_discovery
        self.bad_records = bad_records
        self.dead_letter_topic = dead_letter_topic
        self.bootstrap = bootstrap
        self.start = start
        self.bounded = bounded
        self.value_format = value_format
        self.batch_size = batch_size
        self.consumer_config = dict(consumer_config)
        self.timeout = timeout
        self._plans: dict[str, list[KafkaPartition]] = {}

    # ------------------------------------------------------------------ the plan

    def _plan_uri(self, staging_uri: str) -> str:
        """Where the plan is staged: named by everything that makes it this input's."""
        brokers = sorted({server.strip() for server in self.bootstrap.split(",")
                          if server.strip()})
        choice = json.dumps({"bootstrap": brokers, "topics": self.topics,
                             "start": self.start, "bounded": self.bounded}, sort_keys=True)
        digest = hashlib.sha256(choice.encode()).hexdigest()[:16]
        return join_uri(staging_uri, "kafka", f"plan-{digest}.json")

    def prepare_on_driver(self, *, spark_context: Any, staging: DriverStaging) -> None:
        """At the job's first start, resolve the plan and stage it; later attempts
        find it staged and ask the brokers nothing (a broker down during a restart
        only makes the readers wait)."""
        uri = self._plan_uri(staging.uri)
        fs = get_filesystem(uri)
        if fs.exists(uri):
            _parse_plan(fs.read_bytes(uri), uri=uri)
            return
        plan = self.resolve_plan()
        fs.write_bytes(uri, _plan_bytes(plan, source=self))
        log.info("kafka source: %d partitions of %s planned, from %s", len(plan),
                 ", ".join(self.topics), _describe_offsets(plan))

    def _plan(self, context: SourceContext) -> list[KafkaPartition]:
        uri = self._plan_uri(context.staging_uri)
        plan = self._plans.get(uri)
        if plan is None:
            fs = get_filesystem(uri, s3=context.s3)
            plan = _parse_plan(fs.read_bytes(uri), uri=uri) if fs.exists(uri) else \
                self.resolve_plan()
            self._plans[uri] = plan
        return plan

    def resolve_plan(self) -> list[KafkaPartition]:
        """The partitions of ``topics`` and their offsets, as the brokers report them now."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        # OffsetSpec's documented home is confluent_kafka.admin, whose stubs do not
        # re-export it; its factories are untyped.
        from confluent_kafka.admin._listoffsets import OffsetSpec

        admin = AdminClient(self._admin_settings())
        metadata = self._cluster_metadata(admin)
        cluster = metadata.cluster_id or None
        partitions: list[TopicPartition] = []
        for topic in self.topics:
            described = metadata.topics.get(topic)
            if described is None:
                raise self._config_error(f"topic {topic!r} does not exist at {self.bootstrap}")
            if described.error is not None:
                raise self._config_error(f"topic {topic!r}: {described.error.str()}")
            partitions.extend(TopicPartition(topic, p) for p in sorted(described.partitions))
        if self.dead_letter_topic is not None and self.dead_letter_topic not in metadata.topics:
            raise self._config_error(f"the dead-letter topic {self.dead_letter_topic!r} does "
                                     f"not exist at {self.bootstrap}")
        latest: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        start_spec: OffsetSpec = (
            OffsetSpec.for_timestamp(self.start) if isinstance(self.start, int)
            else OffsetSpec.earliest() if self.start == "earliest"  # type: ignore[no-untyped-call]
            else latest)
        starts = self._offsets(admin, partitions, start_spec)
        # After the starts, so that a start resolved to "latest" is never past the end.
        ends = self._offsets(admin, partitions, latest) \
            if self.bounded or isinstance(self.start, int) else {}
        plan: list[KafkaPartition] = []
        for tp in partitions:
            key = (tp.topic, tp.partition)
            start = starts[key]
            if start < 0:  # no record at or after the start timestamp: the end
                start = ends[key]
            end = ends[key] if self.bounded else None
            plan.append(KafkaPartition(topic=tp.topic, partition=tp.partition,
                                       start=start if end is None else min(start, end),
                                       end=end, cluster=cluster))
        return plan

    def _cluster_metadata(self, admin: AdminClient) -> ClusterMetadata:
        """The brokers' topics and partitions, or a one-line error when none answers."""
        from confluent_kafka import KafkaException

        try:
            return admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise self._config_error(
                f"no Kafka broker at {self.bootstrap} answered within {self.timeout:g}s "
                f"({client_error_text(exc)})") from None

    def _offsets(self, admin: AdminClient, partitions: list[TopicPartition],
                 spec: OffsetSpec) -> dict[tuple[str, int], int]:
        """Each partition's offset for ``spec``, asking again while its leader is unknown.

        A topic created a moment ago, or one whose leader's broker is restarting,
        answers "not leader" or "leader not available" until the leadership settles:
        that is a wait, not a mistake of the user's, so only the partitions that gave a
        transient error are asked again, until ``timeout``.
        """
        from confluent_kafka import IsolationLevel

        deadline = time.monotonic() + self.timeout
        pause = 0.1
        found: dict[tuple[str, int], int] = {}
        pending = list(partitions)
        while pending:
            futures = admin.list_offsets({tp: spec for tp in pending},
                                         isolation_level=IsolationLevel.READ_COMMITTED,
                                         request_timeout=self.timeout)
            retry: list[TopicPartition] = []
            for tp, future in futures.items():
                try:
                    info = future.result(timeout=self.timeout + 5.0)
                except Exception as exc:
                    if _transient(exc) and time.monotonic() + pause < deadline:
                        retry.append(tp)
                        continue
                    raise self._config_error(
                        f"cannot read the offsets of topic {tp.topic!r} partition "
                        f"{tp.partition} at {self.bootstrap}: {client_error_text(exc)}"
                    ) from None
                found[(tp.topic, tp.partition)] = int(info.offset)
            if retry:
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
            pending = retry
        return found

    # ------------------------------------------------------------------ splits and readers

    @property
    def reads_splits_together(self) -> bool:
        """Partitions of an unbounded topic never end: a subtask reads all of its
        partitions in turn (and a bounded one too, so their records interleave)."""
        return True

    def splits(self, *, context: SourceContext) -> list[Split]:
        return [Split(index=i, description=part) for i, part in enumerate(self._plan(context))]

    @property
    def unbounded(self) -> bool:
        return not self.bounded

    @property
    def discovery_interval(self) -> float | None:
        """A bounded source reads the partitions of its first start only."""
        return None if self.bounded else self.partition_discovery

    def discover(self, *, context: SourceContext, known: Set[int]) -> list[Split]:
        """Partitions the topics gained since the plan, read from their earliest offset
        (every record of a partition created after the job started is newer than the
        start)."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.admin._listoffsets import OffsetSpec

        plan = self._plan(context)
        planned = {(part.topic, part.partition) for part in plan}
        cluster = plan[0].cluster if plan else None
        admin = AdminClient(self._admin_settings())
        metadata = self._cluster_metadata(admin)
        found: dict[tuple[str, int], int] = {}
        for place, topic in enumerate(self.topics):
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                continue
            for partition in sorted(described.partitions):
                index = discovered_index(place, partition)
                if (topic, partition) not in planned and index not in known:
                    found[(topic, partition)] = index
        if not found:
            return []
        earliest: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        starts = self._offsets(admin, [TopicPartition(t, p) for t, p in found], earliest)
        return [Split(index=index, description=KafkaPartition(
                    topic=topic, partition=partition, start=starts[(topic, partition)],
                    end=None, cluster=cluster))
                for (topic, partition), index in found.items()]

    def start_position(self, split: Split) -> dict[str, Any]:
        """A partition not read yet is kept as what it is, from its start: a restore
        under a new plan still knows which partition it was."""
        part: KafkaPartition = split.description
        return KafkaPosition(topic=part.topic, partition=part.partition, offset=part.start,
                             end=part.end, cluster=part.cluster).to_json()

    def restore_splits(self, splits: Sequence[Split], positions: Mapping[int, Any], *,
                       context: SourceContext) -> list[RestoredSplit]:
        """The plan's partitions and those only the checkpoint knows, each continuing
        from the checkpoint's offset of *that partition*, whatever index it had there.

        No broker is asked: a partition the checkpoint holds and the plan does not
        (discovered by an earlier attempt) is rebuilt from its position; one the plan
        lists and the checkpoint does not starts from its beginning when the
        checkpoint read its topic (the partition was added since), else from the
        plan's start (a topic new to the job).
        """
        by_partition, unnamed = self._checkpointed(positions, splits=splits, context=context)
        known_topics = {topic for topic, _ in by_partition}
        restored: list[RestoredSplit] = []
        for split in splits:
            part: KafkaPartition = split.description
            position = by_partition.pop((part.topic, part.partition), None)
            if position is None and split.index in unnamed:
                # A partition not read yet, in a checkpoint whose positions did not
                # name theirs: the plan that wrote it is this one.
                restored.append(RestoredSplit(split=split, position=None))
            elif position is not None:
                restored.append(RestoredSplit(split=split, position=self._continued(
                    position, part=part, context=context)))
            elif part.topic in known_topics:
                restored.append(RestoredSplit(split=Split(index=split.index, description=(
                    dataclasses.replace(part, start=BEGINNING))), position=None))
            else:
                restored.append(RestoredSplit(split=split, position=None))
        planned_cluster = next((s.description.cluster for s in splits), None)
        dropped: list[str] = []
        for (topic, partition), position in sorted(by_partition.items()):
            if topic not in self.topics:
                dropped.append(f"{topic}/{partition}")
                continue
            part = KafkaPartition(topic=topic, partition=partition, start=position.offset,
                                  end=position.end if self.bounded else None,
                                  cluster=position.cluster or planned_cluster)
            restored.append(RestoredSplit(
                split=Split(index=discovered_index(self.topics.index(topic), partition),
                            description=part),
                position=self._continued(position, part=part, context=context)))
        if dropped:
            log.warning("kafka source: the checkpoint holds positions of %s, whose topics the "
                        "job no longer reads: they are not read", ", ".join(dropped[:10]))
        return restored

    def _checkpointed(self, positions: Mapping[int, Any], *, splits: Sequence[Split],
                      context: SourceContext
                      ) -> tuple[dict[tuple[str, int], KafkaPosition], set[int]]:
        """The checkpoint's positions by partition; and the indexes of the plan's
        splits it holds without naming a partition (``None``: not read yet, written
        before positions named theirs). Two positions of one partition (a plan that
        read it under two indexes) keep the farther."""
        listed = {split.index for split in splits}
        by_partition: dict[tuple[str, int], KafkaPosition] = {}
        unnamed: set[int] = set()
        for index, data in sorted(positions.items()):
            if data is None:
                if index in listed:
                    unnamed.add(index)
                continue
            position = KafkaPosition.from_json(data)
            if position is None:
                raise UserCodeError(operator=self.name, subtask=context.subtask, details=(
                    f"the checkpoint's position of split {index} is {data!r}, which is not "
                    f"a Kafka partition's: the job's sources changed since the checkpoint "
                    f"(a union's inputs keep their order)"))
            earlier = by_partition.get(position.key)
            if earlier is not None:
                log.warning("kafka source: the checkpoint holds topic %r partition %d twice "
                            "(offsets %d and %d): it continues from the farther",
                            position.topic, position.partition, earlier.offset,
                            position.offset)
                if earlier.offset >= position.offset:
                    continue
            by_partition[position.key] = position
        return by_partition, unnamed

    def _continued(self, position: KafkaPosition, *, part: KafkaPartition,
                   context: SourceContext) -> dict[str, Any]:
        """``position`` for the partition ``part`` of this source's plan; refused when
        the two are at different clusters."""
        if position.cluster and part.cluster and position.cluster != part.cluster:
            raise UserCodeError(operator=self.name, subtask=context.subtask, details=(
                f"the checkpoint's position of topic {position.topic!r} partition "
                f"{position.partition} is at Kafka cluster {position.cluster!r}, but "
                f"{self.bootstrap} is cluster {part.cluster!r}: offsets of one cluster mean "
                f"nothing at another"))
        return dataclasses.replace(position, cluster=part.cluster or position.cluster).to_json()

    def open(self, split: Split, position: Any, *, context: SourceContext) -> SplitReader:
        part: KafkaPartition = split.description
        if position is None:
            offset, end = part.start, part.end
        else:
            kept = KafkaPosition.from_json(position)
            if kept is None or kept.key != (part.topic, part.partition):
                raise UserCodeError(operator=self.name, subtask=context.subtask, details=(
                    f"the checkpoint's position of split {split.index} is {position!r}, but "
                    f"that split is now topic {part.topic!r} partition {part.partition}: the "
                    f"topics or their partitions changed since the checkpoint"))
            offset = kept.offset
            end = part.end if kept.end is None else kept.end
        return _KafkaReader(source=self, part=part, offset=offset,
                            end=end if self.bounded else None,
                            batch_size=self.batch_size or context.batch_size,
                            subtask=context.subtask, columns=context.columns,
                            job_id=context.job_id)

    # ------------------------------------------------------------------ clients

    def consumer_settings(self, *, job_id: str = "") -> dict[str, Any]:
        """``job_id`` names the consumer group (``cjob-<job id>``) the checkpoints'
        offsets are copied to, unless ``consumer_config`` names one."""
        return {"group.id": GROUP_ID_PREFIX + (job_id or "job"), **CONSUMER_DEFAULTS,
                **self.consumer_config,
                "bootstrap.servers": self.bootstrap, "isolation.level": "read_committed",
                "enable.auto.commit": False, "enable.auto.offset.store": False,
                "enable.partition.eof": True, "auto.offset.reset": "error",
                "logger": _CLIENT_LOG}

    def _admin_settings(self) -> dict[str, Any]:
        return self.client_settings()

    def client_settings(self) -> dict[str, Any]:
        """The user's client settings (security, ...) for a client that is not the
        consumer: the admin client, the dead-letter producer."""
        settings = {k: v for k, v in self.consumer_config.items() if k != "group.id"}
        return {**settings, "bootstrap.servers": self.bootstrap, "logger": _CLIENT_LOG}

    # ------------------------------------------------------------------ records

    def to_arrow(self, messages: list[Message], *, part: KafkaPartition, subtask: int,
                 offsets: list[int] | None = None,
                 columns: frozenset[str] | None = None) -> pa.RecordBatch:
        """The records as columns: ``key``, ``value`` (or the JSON object's fields),
        ``headers``, ``timestamp`` (ms), ``partition``, ``offset``, ``topic``.

        ``columns``: the only columns the pipeline reads (``None``: all of them). The
        metadata columns cost a call into the client per record each, about as much as
        parsing the JSON: a job that counts per user builds none of them.
        """
        n = len(messages)
        values = [m.value() for m in messages]
        if self.value_format == "raw":
            fields = {"value": pa.array(values, type=pa.binary())}
        else:
            fields = self._json_fields(values, messages, part=part, subtask=subtask)
        if columns is not None:
            fields = {name: array for name, array in fields.items() if name in columns}
        # The values' own fields win over a metadata column of the same name.
        wanted = [name for name in METADATA_COLUMNS
                  if name not in fields and (columns is None or name in columns)]
        metadata: dict[str, pa.Array] = {}
        for name in wanted:
            if name == "key":
                metadata[name] = pa.array([m.key() for m in messages], type=pa.binary())
            elif name == "headers":
                metadata[name] = _headers_column(messages)
            elif name == "timestamp":
                metadata[name] = _timestamp_column(messages)
            elif name == "partition":
                metadata[name] = pa.repeat(pa.scalar(part.partition, pa.int32()), n)
            elif name == "offset":
                metadata[name] = pa.array([m.offset() for m in messages] if offsets is None
                                          else offsets, type=pa.int64())
            else:
                metadata[name] = pa.repeat(pa.scalar(part.topic, pa.string()), n)
        if self.value_format == "raw" and "key" in metadata:
            columns_out = {"key": metadata.pop("key"), **fields, **metadata}
        else:
            columns_out = {**fields, **metadata}
        return pa.RecordBatch.from_arrays(list(columns_out.values()), names=list(columns_out))

    def _json_fields(self, values: list[bytes | None], messages: list[Message], *,
                     part: KafkaPartition, subtask: int) -> dict[str, pa.Array]:
        import pyarrow.json as pajson

        # A record without a value (a tombstone) gives nulls in every field.
        present = cast("list[bytes]", values) if None not in values else \
            [b"{}" if v is None else v for v in values]
        data = b"\n".join(present)
        multiline = data.count(b"\n") != len(values) - 1
        try:
            table = pajson.read_json(
                io.BytesIO(data),
                # One block: the columns' types are inferred from the whole batch.
                read_options=pajson.ReadOptions(block_size=len(data) + 1),
                parse_options=pajson.ParseOptions(newlines_in_values=multiline))
        except pa.ArrowInvalid as exc:
            raise self._bad_json(messages, part=part, subtask=subtask, arrow=str(exc)) from None
        if table.num_rows != len(values):
            raise self._bad_json(messages, part=part, subtask=subtask,
                                 arrow=f"{table.num_rows} rows from {len(values)} values")
        return {name: table.column(name).combine_chunks() for name in table.column_names}

    def _bad_json(self, messages: list[Message], *, part: KafkaPartition, subtask: int,
                  arrow: str) -> UserCodeError:
        """The first record whose value is not one JSON object, found one by one."""
        for message in messages:
            value = message.value()
            if value is None:
                continue
            offset = message.offset() or 0
            try:
                decoded = json.loads(value)
            except ValueError as exc:
                return self.user_error(part, offset, subtask=subtask,
                                       problem=f"the value is not valid JSON ({exc})")
            if not isinstance(decoded, dict):
                return self.user_error(part, offset, subtask=subtask,
                                       problem=f"the value is JSON but not an object "
                                               f"({type(decoded).__name__})")
        first, last = messages[0].offset() or 0, messages[-1].offset() or 0
        return UserCodeError(operator=self.name, subtask=subtask, details=(
            f"kafka topic {part.topic!r} partition {part.partition} offsets {first}..{last}: "
            f"the JSON values cannot be decoded into columns together: {arrow}"))

    # ------------------------------------------------------------------ errors

    def user_error(self, part: KafkaPartition, offset: int, *, subtask: int,
                   problem: str) -> UserCodeError:
        return UserCodeError(operator=self.name, subtask=subtask, details=(
            f"kafka topic {part.topic!r} partition {part.partition} offset {offset}: {problem}"))

    def _config_error(self, problem: str) -> ConfigurationError:
        return ConfigurationError(setting="sources.kafka", problem=problem)


def _headers(message: Message) -> list[dict[str, Any]]:
    headers = message.headers()
    if not headers:
        return []
    items = headers.items() if isinstance(headers, dict) else headers
    return [{"key": key, "value": value.encode() if isinstance(value, str) else value}
            for key, value in items]


def _headers_column(messages: list[Message]) -> pa.Array:
    found = [m.headers() for m in messages]
    if not any(found):
        # No record has headers (the common case): empty lists, built without a loop.
        return pa.ListArray.from_arrays(
            pa.array(np.zeros(len(messages) + 1, dtype=np.int32)),
            pa.array([], type=HEADERS_TYPE.value_type))
    return pa.array([_headers(m) for m in messages], type=HEADERS_TYPE)


TIMESTAMP_NOT_AVAILABLE = 0
"""``confluent_kafka.TIMESTAMP_NOT_AVAILABLE``, written here: the client is imported
lazily, and the constant is compared against a whole column at once."""


def _timestamp_column(messages: list[Message]) -> pa.Array:
    """The records' timestamps (ms), null where the record has none: the (kind, value)
    pairs flattened into one numpy array, no Python call per record but the client's."""
    pairs = np.fromiter(itertools.chain.from_iterable(m.timestamp() for m in messages),
                        dtype=np.int64, count=2 * len(messages)).reshape(-1, 2)
    missing = pairs[:, 0] == TIMESTAMP_NOT_AVAILABLE
    return pa.array(pairs[:, 1], type=pa.int64(), mask=missing if missing.any() else None)


def discovered_index(place: int, partition: int) -> int:
    """The split index of a partition found while the job runs (see
    :data:`DISCOVERED_INDEX_BASE`)."""
    return (place + 1) * DISCOVERED_INDEX_BASE + partition


def _plan_bytes(plan: list[KafkaPartition], *, source: KafkaSource) -> bytes:
    return json.dumps({
        "version": PLAN_VERSION, "bootstrap": source.bootstrap, "topics": source.topics,
        "start": source.start, "bounded": source.bounded,
        "clusterId": plan[0].cluster if plan else None,
        "plannedAt": int(time.time() * 1000),
        "partitions": [{"topic": part.topic, "partition": part.partition,
                        "start": part.start, "end": part.end} for part in plan],
    }, indent=1).encode()


def _parse_plan(data: bytes, *, uri: str) -> list[KafkaPartition]:
    document = json.loads(data)
    if document.get("version") not in PLAN_VERSIONS:
        raise ConfigurationError(setting="sources.kafka",
                                 problem=f"the staged plan {uri} has an unknown version "
                                         f"{document.get('version')!r}")
    cluster = document.get("clusterId")
    return [KafkaPartition(topic=str(p["topic"]), partition=int(p["partition"]),
                           start=int(p["start"]),
                           end=None if p["end"] is None else int(p["end"]),
                           cluster=None if cluster is None else str(cluster))
            for p in document["partitions"]]


def _describe_offsets(plan: list[KafkaPartition]) -> str:
    return ", ".join(f"{p.topic}/{p.partition}@{p.start}" + ("" if p.end is None else
                                                           f"..{p.end}") for p in plan[:8]) + (
        f" and {len(plan) - 8} more" if len(plan) > 8 else "")


def kafka(topics: str | Sequence[str], bootstrap: str, *, start: str | int = "earliest",
          bounded: bool = False, value_format: str = "raw", batch_size: int | None = None,
          consumer_config: Mapping[str, Any] | None = None,
          timeout: float = 30.0, bad_records: str = "fail",
          dead_letter_topic: str | None = None, commit_offsets: bool = True,
          partition_discovery: float | None = DEFAULT_DISCOVERY_SECONDS) -> KafkaSource:
    """Read the records of Kafka ``topics`` (a name or a list) from the brokers at
    ``bootstrap`` (``host:port[,host:port...]``); one split per partition.

    ``start``: ``"earliest"``, ``"latest"`` or a time in milliseconds since the epoch
    (the first record at or after it), resolved once, at the job's first start; a
    restore always continues from the checkpoint. ``bounded=True`` ends every
    partition at its end at the first start (tests, backfills); by default the source
    never ends. ``value_format="json"`` decodes each value, a JSON object, into
    columns. ``batch_size`` rows per batch at most; by default the pipeline's choice.
    ``consumer_config``: further client settings (security, fetch sizes), except the
    ones the source sets itself. ``timeout``: how long the driver waits for the
    brokers at the first start. ``bad_records`` (with ``value_format="json"``):
    ``"fail"`` ends the job at a value that is not one JSON object, naming its topic,
    partition and offset; ``"dead-letter"`` writes such records to
    ``dead_letter_topic`` (which must exist) with headers ``cjob.error``,
    ``cjob.topic``, ``cjob.partition`` and ``cjob.offset``, at least once, and goes on.

    ``partition_discovery``: seconds between looks for partitions added to the topics
    while an unbounded job runs (read from their earliest offset); ``None`` reads the
    partitions of the first start only. ``commit_offsets``: when a checkpoint
    completes, copy its offsets to the consumer group ``cjob-<job id>`` (or
    ``consumer_config``'s ``group.id``) for lag monitors; restores never read them.
    """
    names = [topics] if isinstance(topics, str) else list(topics)
    if not names or not all(isinstance(t, str) and t for t in names):
        raise PipelineDefinitionError(problem="kafka source needs one or more topic names")
    names = list(dict.fromkeys(names))
    if not isinstance(bootstrap, str) or not bootstrap.strip():
        raise PipelineDefinitionError(problem="kafka source needs the brokers' bootstrap "
                                              "address (host:port)")
    if isinstance(start, bool) or not (start in STARTS or (isinstance(start, int) and start >= 0)):
        raise PipelineDefinitionError(
            problem=f"kafka source start must be 'earliest', 'latest' or a time in "
                    f"milliseconds since the epoch, got {start!r}")
    if value_format not in VALUE_FORMATS:
        raise PipelineDefinitionError(
            problem=f"kafka source value_format must be one of {', '.join(VALUE_FORMATS)}, "
                    f"got {value_format!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                   or batch_size < 1):
        raise PipelineDefinitionError(
            problem=f"kafka source batch_size must be a positive number, got {batch_size!r}")
    if not isinstance(timeout, int | float) or timeout <= 0:
        raise PipelineDefinitionError(
            problem=f"kafka source timeout must be a positive number of seconds, got {timeout!r}")
    if bad_records not in BAD_RECORDS:
        raise PipelineDefinitionError(
            problem=f"kafka source bad_records must be one of {', '.join(BAD_RECORDS)}, "
                    f"got {bad_records!r}")
    if bad_records == "dead-letter" and value_format != "json":
        raise PipelineDefinitionError(
            problem="kafka source bad_records='dead-letter' needs value_format='json' "
                    "(raw values are never bad)")
    if bad_records == "dead-letter" and (not isinstance(dead_letter_topic, str)
                                         or not dead_letter_topic):
        raise PipelineDefinitionError(
            problem="kafka source bad_records='dead-letter' needs a dead_letter_topic")
    if dead_letter_topic is not None and bad_records != "dead-letter":
        raise PipelineDefinitionError(
            problem="kafka source dead_letter_topic is used only with "
                    "bad_records='dead-letter'")
    if dead_letter_topic is not None and dead_letter_topic in names:
        raise PipelineDefinitionError(
            problem="kafka source dead_letter_topic must not be one of the topics it reads")
    if partition_discovery is not None and (
            isinstance(partition_discovery, bool)
            or not isinstance(partition_discovery, int | float) or partition_discovery <= 0):
        raise PipelineDefinitionError(
            problem=f"kafka source partition_discovery must be a positive number of seconds "
                    f"or None, got {partition_discovery!r}")
    settings = dict(consumer_config or {})
    for key in settings:
        reason = _OWN_SETTINGS.get(key)
        if reason is not None:
            raise PipelineDefinitionError(
                problem=f"kafka source consumer_config may not set {key!r}: {reason}")
    return KafkaSource(topics=names, bootstrap=bootstrap.strip(), start=start,
                       bounded=bool(bounded), value_format=value_format, batch_size=batch_size,
                       consumer_config=settings, timeout=float(timeout),
                       bad_records=bad_records, dead_letter_topic=dead_letter_topic,
                       commit_offsets=bool(commit_offsets),
                       partition_discovery=None if partition_discovery is None
                       else float(partition_discovery))
