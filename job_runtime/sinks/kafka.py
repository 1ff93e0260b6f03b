"""``kafka``: records into a Kafka topic, exactly once through transactions.

Exactly once is the write-ahead sink (:mod:`job_runtime.sinks.write_ahead`) with Kafka
as both the receiver and the committer. When a checkpoint completes, a subtask sends
each of its pending intervals in one Kafka transaction that also writes a *commit
marker* to a control topic (default ``cjob-commits``, compacted, keyed by job and
subtask, valued with the newest checkpoint sent). A ``read_committed`` read of the
markers therefore tells exactly which intervals are in the topic: a crashed
transaction is aborted and its marker with it, and the interval is sent again.

No Kafka client can resume another process's open transaction (``init_transactions``
aborts it), which is why the records are sent only at completion, from the staged
interval, and never left in a transaction across a crash.

Transactional ids are stable and few: ``cjob-<job id>-<subtask>``. Opening a writer
initialises the ids it owns (its own, and those of subtasks a rescale removed, whose
pending intervals it inherits), which fences any zombie producer of an older attempt
and aborts a transaction one left open; until that happens, every ``read_committed``
reader of the topic is held at that open transaction.

Intervals of one subtask are sent in checkpoint order (the write-ahead sink's rule),
so "sent through checkpoint N" per subtask is the whole committer state, and the
compacted control topic stays as small as the number of (job, subtask) pairs.

``delivery="at-least-once"`` skips all of that: records are produced as they come and
flushed at each barrier (the checkpoint waits for the broker's acknowledgement), so a
restore can only repeat records, never lose them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import hmac
import json
import logging
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from job_runtime.errors import ConfigurationError, PipelineDefinitionError, client_error_text
from job_runtime.records import Batch
from job_runtime.sinks.base import Sink, SinkContext, SinkWriter
from job_runtime.sinks.commit import CommitRetry, SinkFencedError
from job_runtime.sinks.failures import (
    BadRecords,
    RejectedRecordError,
    SinkFailedError,
    SinkFailureKind,
)
from job_runtime.sinks.write_ahead import (
    DEFAULT_MEMORY_BYTES,
    CheckpointCommitter,
    WriteAheadWriter,
    staging_path,
)

log = logging.getLogger(__name__)

__all__ = ["CommitMarker", "KafkaDelivery", "KafkaSink", "SinkFencedError", "kafka"]

MARKER_VERSION = 2
LEGACY_MARKER_VERSION = 1
"""Markers of the shared control topic, as releases before per-job topics wrote them."""
MAX_TOPIC_NAME = 249
_TOPIC_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
DEFAULT_CONTROL_TOPIC = "cjob-commits"
DEFAULT_TRANSACTION_TIMEOUT = 60.0
MAX_TRANSACTION_TIMEOUT = 900.0
"""The broker's default ``transaction.max.timeout.ms`` (15 minutes)."""
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
"""The producer's default ``message.max.bytes``: a larger record never leaves it."""
DEAD_LETTER_HEADERS = ("cjob.error", "cjob.topic", "cjob.checkpoint", "cjob.subtask",
                       "cjob.position", "cjob.value-bytes")

EncodedRecord = tuple[bytes | None, bytes, str | None]
"""A record as key and value bytes, and why the broker would refuse it (``None``: it
would not, as far as the sink can tell before sending)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeadLetter:
    """A refused record as it goes to the dead-letter topic: its own key, its value if
    the topic can hold it, and headers that say why and from where."""

    topic: str
    value: bytes | None
    headers: list[tuple[str, bytes]]

_OWN_SETTINGS = {
    "transactional.id": "the sink derives stable ids from the job and the subtask",
    "enable.idempotence": "the sink needs it on, and transactions require it",
    "transaction.timeout.ms": "use the sink's transaction_timeout",
    "bootstrap.servers": "use the sink's bootstrap",
}


class KafkaDelivery(enum.StrEnum):
    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommitMarker:
    """What a control topic says of one (job, subtask): sent through ``checkpoint``.

    Version 2 (the job's own topic) names the ``writer`` (the transactional id that
    sent it) and carries ``mac``, an HMAC-SHA256 under the key of the interval it
    commits: the key travels only in the job's checkpoints, so a marker anyone else
    wrote proves nothing and is ignored. Version 1 (the shared topic of older
    releases) has neither, and is read only for intervals such a release staged.
    """

    job: str
    subtask: int
    checkpoint: int
    writer: str = ""
    mac: str = ""
    version: int = MARKER_VERSION

    @property
    def key(self) -> bytes:
        return f"{self.job}/{self.subtask}".encode()

    @staticmethod
    def _message(*, job: str, subtask: int, checkpoint: int, writer: str) -> bytes:
        return f"{job}|{subtask}|{checkpoint}|{writer}".encode()

    @classmethod
    def signed(cls, *, job: str, subtask: int, checkpoint: int, writer: str,
               key: bytes) -> CommitMarker:
        mac = hmac.new(key, cls._message(job=job, subtask=subtask, checkpoint=checkpoint,
                                         writer=writer), hashlib.sha256).hexdigest()
        return cls(job=job, subtask=subtask, checkpoint=checkpoint, writer=writer, mac=mac)

    def proven_by(self, key: bytes) -> bool:
        """Whether the holder of ``key`` wrote this marker."""
        if self.version != MARKER_VERSION or not self.mac:
            return False
        expected = hmac.new(key, self._message(job=self.job, subtask=self.subtask,
                                               checkpoint=self.checkpoint, writer=self.writer),
                            hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.mac)

    def value(self) -> bytes:
        data: dict[str, Any] = {"version": self.version, "job": self.job,
                                "subtask": self.subtask, "checkpoint": self.checkpoint}
        if self.version == MARKER_VERSION:
            data.update(writer=self.writer, mac=self.mac)
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def parse(cls, value: bytes | None) -> CommitMarker | None:
        """The marker in a control record; ``None`` for one of an unknown version, a
        malformed one, or a tombstone."""
        try:
            data = json.loads(value or b"")
            version = data.get("version")
            if version not in (LEGACY_MARKER_VERSION, MARKER_VERSION):
                return None
            return cls(job=str(data["job"]), subtask=int(data["subtask"]),
                       checkpoint=int(data["checkpoint"]), version=int(version),
                       writer=str(data.get("writer") or ""), mac=str(data.get("mac") or ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def transactional_id(job_id: str, subtask: int) -> str:
    return f"cjob-{job_id}-{subtask}"


def control_topic_of(base: str, job: str) -> str:
    """The control topic of one job: ``<base>.<job>``, with characters Kafka does not
    allow in a name replaced, and a long one shortened with a hash that keeps it apart
    from every other job's."""
    safe = _TOPIC_UNSAFE.sub("_", job)
    name = f"{base}.{safe}"
    if len(name) <= MAX_TOPIC_NAME:
        return name
    digest = hashlib.sha256(job.encode()).hexdigest()[:16]
    keep = MAX_TOPIC_NAME - len(base) - len(digest) - 2
    return f"{base}.{safe[:keep]}-{digest}"


def read_control(*, bootstrap: str, control_topic: str, job: str, timeout: float,
                 client_config: Mapping[str, Any]) -> list[CommitMarker]:
    """Every marker of ``job`` in ``control_topic`` (none when the topic does not
    exist), read ``read_committed`` from the start to the high watermark seen at the
    start; an open transaction holds the read until it ends (at most its transaction
    timeout), since a marker behind it may be this job's."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        **client_config,
        "bootstrap.servers": bootstrap,
        "group.id": f"cjob-markers-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
    })
    markers: list[CommitMarker] = []
    try:
        described = consumer.list_topics(topic=control_topic, timeout=timeout).topics.get(
            control_topic)
        if described is None or described.error is not None:
            return markers
        targets: dict[int, int] = {}
        for partition in described.partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(control_topic, partition),
                                                     timeout=timeout)
            if high > 0:
                targets[partition] = high
        if not targets:
            return markers
        consumer.assign([TopicPartition(control_topic, p, OFFSET_BEGINNING) for p in targets])
        deadline = time.monotonic() + timeout
        while targets:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the control topic {control_topic} was not read to its "
                                   f"end within {timeout:g}s (an open transaction?)")
            message = consumer.poll(0.2)
            error = None if message is None else message.error()
            if message is not None and error is None:
                marker = CommitMarker.parse(message.value())
                if marker is not None and marker.job == job:
                    markers.append(marker)
            elif error is not None and error.code() != KafkaError._PARTITION_EOF:
                log.warning("reading %s: %s", control_topic, error)
            positions = consumer.position([TopicPartition(control_topic, p) for p in targets])
            for position in positions:
                if position.offset >= targets[position.partition]:
                    del targets[position.partition]
        return markers
    finally:
        consumer.close()


def read_markers(*, bootstrap: str, control_topic: str, job: str, timeout: float,
                 client_config: Mapping[str, Any]) -> dict[int, int]:
    """Subtask -> the newest checkpoint ``control_topic`` says was sent for ``job``,
    proven or not: for what only warns or reports."""
    return newest_by_subtask(read_control(bootstrap=bootstrap, control_topic=control_topic,
                                          job=job, timeout=timeout,
                                          client_config=client_config))


def newest_by_subtask(markers: Iterable[CommitMarker]) -> dict[int, int]:
    """Subtask -> the newest checkpoint ``markers`` say was sent."""
    through: dict[int, int] = {}
    for marker in markers:
        through[marker.subtask] = max(through.get(marker.subtask, 0), marker.checkpoint)
    return through


class _Transactions(CheckpointCommitter):
    """The exactly-once Kafka writer's sending side and committer in one: an interval
    and its marker go out in one transaction, so ``commit`` has nothing left to do."""

    def __init__(self, *, sink: KafkaSink, context: SinkContext) -> None:
        self._sink = sink
        self._context = context
        self._job = context.job_id
        self._producer: Any = None
        self._topic = control_topic_of(sink.control_topic, self._job)
        self._markers: dict[int, list[CommitMarker]] = {}
        """The job's markers in its own topic, by subtask (proven or not: the keys that
        prove them may be learnt later)."""
        self._legacy: dict[int, int] | None = None
        """What the shared topic of older releases says, read once when an interval they
        staged is asked about."""
        self._keys: dict[tuple[int, int], bytes | None] = {}
        """(subtask, checkpoint) -> the key of that interval (``None``: an older
        release's interval, without one)."""
        self._known: set[bytes] = set()
        self._stale = True
        """Whether the markers must be read again before the next answer: at the start,
        and after a commit whose outcome is unknown."""
        self._fenced: SinkFencedError | None = None

    # ------------------------------------------------------------------ producers

    def _owned_ids(self) -> list[int]:
        ctx = self._context
        upper = max(ctx.parallelism, ctx.restored_parallelism)
        return list(range(ctx.subtask, upper, ctx.parallelism))

    def _new_producer(self, subtask: int) -> Any:
        from confluent_kafka import Producer

        return Producer({**self._sink.producer_settings(),
                         "transactional.id": transactional_id(self._job, subtask)})

    def _init(self, producer: Any, subtask: int) -> None:
        from confluent_kafka import KafkaException

        try:
            producer.init_transactions(self._sink.timeout)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if error is not None and error.fatal():
                self._fenced = SinkFencedError(
                    f"transactional id {transactional_id(self._job, subtask)}: {client_error_text(exc)}")
                raise self._fenced from None
            raise

    def start(self) -> None:
        """Initialise every id this subtask owns (fencing zombies, aborting what they
        left open), then read the markers."""
        if self._fenced is not None:
            raise self._fenced
        for subtask in self._owned_ids():
            if subtask == self._context.subtask:
                continue
            self._init(self._new_producer(subtask), subtask)
        if self._producer is None:
            producer = self._new_producer(self._context.subtask)
            self._init(producer, self._context.subtask)
            self._producer = producer
        markers: dict[int, list[CommitMarker]] = {}
        for marker in read_control(bootstrap=self._sink.bootstrap, control_topic=self._topic,
                                   job=self._job, timeout=self._sink.timeout,
                                   client_config=self._sink.client_config):
            if marker.version == MARKER_VERSION:
                markers.setdefault(marker.subtask, []).append(marker)
        self._markers = markers
        self._stale = False

    # ------------------------------------------------------------------ committer

    def learn_interval(self, *, subtask: int, checkpoint_id: int, key: str) -> None:
        self._keys[(subtask, checkpoint_id)] = bytes.fromhex(key) if key else None
        if key:
            self._known.add(bytes.fromhex(key))

    def is_committed(self, *, subtask: int, checkpoint_id: int) -> bool:
        """Whether a marker says the interval was sent: for an interval with a key, a
        marker in the job's topic proven by a key of the job's intervals (markers say
        "sent through", and a later interval's may be the one compaction kept); for one
        an older release staged, a marker in the shared topic."""
        if self._stale:
            self.start()
        if self._keys.get((subtask, checkpoint_id)) is None:
            return checkpoint_id <= self._legacy_through().get(subtask, 0)
        for marker in self._markers.get(subtask, []):
            if marker.checkpoint >= checkpoint_id and any(
                    marker.proven_by(key) for key in self._known):
                return True
        return False

    def _legacy_through(self) -> dict[int, int]:
        if self._legacy is None:
            markers = read_control(bootstrap=self._sink.bootstrap,
                                   control_topic=self._sink.control_topic, job=self._job,
                                   timeout=self._sink.timeout,
                                   client_config=self._sink.client_config)
            self._legacy = newest_by_subtask(
                m for m in markers if m.version == LEGACY_MARKER_VERSION)
        return self._legacy

    def commit(self, *, subtask: int, checkpoint_id: int) -> None:
        """The marker went out in the interval's own transaction."""

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(1.0)
            self._producer = None

    # ------------------------------------------------------------------ sending

    def send(self, records: pa.Table, *, checkpoint_id: int, subtask: int) -> int:
        """One interval and its marker in one transaction; the number of its records
        that went to the dead-letter topic instead of the output.

        A record the broker will never take (too large, a value that cannot be
        encoded) is found before the transaction begins where it can be, or from its
        delivery report; it raises :class:`RejectedRecordError`, or with
        ``bad_records="dead-letter"`` goes to the dead-letter topic in the same
        transaction as the rest, so dead letters are exactly once too. Whatever fails,
        the transaction is aborted: no ``read_committed`` reader is left held.
        """
        if self._stale:
            self.start()
        if self._fenced is not None:
            raise self._fenced
        encoded = self._sink.encode_checked(records)
        refused = {position: problem for position, (_, _, problem) in enumerate(encoded)
                   if problem is not None}
        oversized: set[int] = set()
        """Dead letters that the dead-letter topic refused too: sent without the value."""
        while True:
            if refused and self._sink.bad_records is BadRecords.FAIL:
                position = min(refused)
                raise RejectedRecordError(position=position, problem=refused[position])
            if self._stale or self._producer is None:
                self.start()  # an abort replaced the producer: a new one, and the markers
            marker, topic = self._marker(subtask=subtask, checkpoint_id=checkpoint_id)
            failures = self._transaction(encoded, refused=refused, oversized=oversized,
                                         checkpoint_id=checkpoint_id, subtask=subtask,
                                         marker=marker, marker_topic=topic)
            if failures is None:
                if marker.version == MARKER_VERSION:
                    self._markers.setdefault(subtask, []).append(marker)
                elif self._legacy is not None:
                    self._legacy[subtask] = max(self._legacy.get(subtask, 0), checkpoint_id)
                return len(refused)
            # The broker refused some records for good: send the interval again without
            # them (a dead letter it refused goes again without its value).
            for position, problem in failures.items():
                if position in refused:
                    if position in oversized:
                        raise RejectedRecordError(position=position, problem=problem)
                    oversized.add(position)
                else:
                    refused[position] = problem

    def _marker(self, *, subtask: int, checkpoint_id: int) -> tuple[CommitMarker, str]:
        """The marker that commits an interval and the topic it goes to: the job's own,
        proven with the interval's key; for an interval an older release staged, the
        shared topic that release reads, as it wrote it."""
        key = self._keys.get((subtask, checkpoint_id))
        if key is None:
            return (CommitMarker(job=self._job, subtask=subtask, checkpoint=checkpoint_id,
                                 version=LEGACY_MARKER_VERSION), self._sink.control_topic)
        return (CommitMarker.signed(job=self._job, subtask=subtask, checkpoint=checkpoint_id,
                                    writer=transactional_id(self._job, self._context.subtask),
                                    key=key), self._topic)

    def _transaction(self, encoded: list[EncodedRecord], *, refused: dict[int, str],
                     oversized: set[int], checkpoint_id: int, subtask: int,
                     marker: CommitMarker, marker_topic: str) -> dict[int, str] | None:
        """Send once; ``None`` when committed, else the positions the broker refused
        for good (the transaction was aborted). Other failures raise, aborted too."""
        from confluent_kafka import KafkaException

        producer = self._producer
        sink = self._sink
        refusals: dict[int, str] = {}

        def delivered(position: int, error: Any, _message: Any) -> None:
            if error is not None and _permanent(error):
                refusals.setdefault(position, _refusal(error))

        try:
            producer.begin_transaction()
            for position, (key, value, _) in enumerate(encoded):
                on_delivery = functools.partial(delivered, position)
                if position in refused:
                    letter = sink.dead_letter(key=key, value=value, problem=refused[position],
                                              checkpoint_id=checkpoint_id, subtask=subtask,
                                              position=position,
                                              keep_value=position not in oversized)
                    _produce(producer, topic=letter.topic, key=key, value=letter.value,
                             headers=letter.headers, on_delivery=on_delivery)
                    continue
                try:
                    _produce(producer, topic=sink.topic, key=key, value=value,
                             on_delivery=on_delivery)
                except KafkaException as exc:  # refused before it left this process
                    error = exc.args[0] if exc.args else None
                    if error is None or not _permanent(error):
                        raise
                    refusals.setdefault(position, _refusal(error))
            if not refusals:
                _produce(producer, topic=marker_topic, key=marker.key, value=marker.value())
                self._commit(producer)
        except Exception as exc:
            self._after_failure(producer, exc, checkpoint_id=checkpoint_id)
            if refusals:  # the broker's delivery reports named them
                return refusals
            raise
        if refusals:
            self._abort(producer, checkpoint_id=checkpoint_id)
            return refusals
        return None

    def _commit(self, producer: Any) -> None:
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self._sink.timeout
        while True:
            try:
                producer.commit_transaction(max(1.0, deadline - time.monotonic()))
                return
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if error is None or not error.retriable() or time.monotonic() > deadline:
                    raise

    def _abort(self, producer: Any, *, checkpoint_id: int) -> None:
        """End the open transaction, or, if the producer cannot, replace it: a new
        producer's initialisation aborts what the old one left open."""
        from confluent_kafka import KafkaException

        try:
            producer.abort_transaction(self._sink.timeout)
            return
        except KafkaException as exc:
            log.warning("aborting the transaction of checkpoint %d failed, replacing the "
                        "producer: %s", checkpoint_id, client_error_text(exc))
        self._producer = None
        self._stale = True
        try:
            self.start()
        except SinkFencedError:
            raise
        except Exception as exc:  # the broker is away: its transaction timeout ends it
            log.warning("a new producer could not end the transaction of checkpoint %d "
                        "yet: %s", checkpoint_id, exc)

    def _after_failure(self, producer: Any, exc: Exception, *, checkpoint_id: int) -> None:
        """Leave the writer able to try again with nothing left open, or mark it fenced."""
        from confluent_kafka import KafkaException

        error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        if error is not None and error.fatal():
            self._producer = None
            self._fenced = SinkFencedError(
                f"interval of checkpoint {checkpoint_id}: {client_error_text(exc)}")
            raise self._fenced from exc
        if error is not None and error.retriable() and not error.txn_requires_abort():
            # A commit whose outcome is unknown (it timed out and may have happened):
            # a new producer's initialisation ends it either way, and the markers say
            # which.
            self._producer = None
            self._stale = True
            return
        self._abort(producer, checkpoint_id=checkpoint_id)


def _permanent(error: Any) -> bool:
    """Whether the broker (or the client, before sending) refuses a record for good."""
    from confluent_kafka import KafkaError

    return bool(error.code() in (*_too_large_codes(), KafkaError.INVALID_RECORD,
                                 KafkaError.INVALID_MSG))


def _too_large_codes() -> tuple[int, ...]:
    from confluent_kafka import KafkaError

    return (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE,
            KafkaError.INVALID_MSG_SIZE)


def _refusal(error: Any) -> str:
    """Why a record was refused, as the dead letter's ``cjob.error`` says it."""
    if error.code() in _too_large_codes():
        return f"the record is too large for the broker ({error.str()})"
    return f"the broker refused the record ({error.str()})"


def _produce(producer: Any, *, topic: str, key: bytes | None, value: bytes | None,
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


class _AtLeastOnceWriter(SinkWriter):
    """Produce as records come; a barrier waits until the broker acknowledged them all.

    A record the broker will never take fails the attempt as refused (no restart would
    get it through: the restored position reads it again), naming its position among
    the records written since the last barrier.
    """

    def __init__(self, *, sink: KafkaSink, context: SinkContext) -> None:
        from confluent_kafka import Producer

        self._sink = sink
        self._subtask = context.subtask
        self._producer = Producer(sink.producer_settings())
        self._failures: list[str] = []
        self._refused: list[tuple[int, str]] = []
        self._written = 0
        """Records written since the last barrier: the next one's positions start here."""
        self._last_checkpoint = 0

    def _delivered(self, position: int, error: Any, message: Any) -> None:
        if error is None:
            return
        if _permanent(error):
            self._refused.append((position, _refusal(error)))
        else:
            self._failures.append(str(error))

    def _refuse(self, position: int, problem: str) -> SinkFailedError:
        return SinkFailedError(kind=SinkFailureKind.REJECTED, sink=self._sink.name,
                               subtask=self._subtask,
                               checkpoint_id=self._last_checkpoint + 1,
                               problem=f"record {position} of the interval: {problem}")

    def write(self, batch: Batch) -> None:
        from confluent_kafka import KafkaException

        if not len(batch):
            return
        for key, value, problem in self._sink.encode_checked(
                pa.Table.from_batches([batch.arrow])):
            position = self._written
            self._written += 1
            if problem is not None:
                raise self._refuse(position, problem)
            try:
                _produce(self._producer, topic=self._sink.topic, key=key, value=value,
                         on_delivery=functools.partial(self._delivered, position))
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if error is None or not _permanent(error):
                    raise
                raise self._refuse(position, _refusal(error)) from None
        self._producer.poll(0)

    def snapshot(self, checkpoint_id: int) -> Any:
        left = self._producer.flush(self._sink.timeout)
        if self._refused:
            position, problem = min(self._refused)
            raise self._refuse(position, problem)
        if left or self._failures:
            failures, self._failures = self._failures, []
            raise RuntimeError(f"kafka sink: {left} records not acknowledged within "
                               f"{self._sink.timeout:g}s; failures: {failures[:3]}")
        self._written = 0
        self._last_checkpoint = checkpoint_id
        return None

    def notify_complete(self, checkpoint_id: int, *, final: bool = False) -> None:
        """Everything was acknowledged at the barrier."""

    def restore(self, states: list[Any]) -> None:
        """Nothing is pending: the records of restored checkpoints are all in the topic."""

    def close(self) -> None:
        self._producer.flush(1.0)


class KafkaSink(Sink):
    name = "kafka"

    def __init__(self, *, topic: str, bootstrap: str, key: str | None,
                 delivery: KafkaDelivery, control_topic: str, transaction_timeout: float,
                 timeout: float, producer_config: Mapping[str, Any],
                 commit_retry: CommitRetry, memory_bytes: int,
                 bad_records: BadRecords = BadRecords.FAIL,
                 dead_letter_topic: str | None = None) -> None:
        self.topic = topic
        self.bad_records = bad_records
        self.dead_letter_topic = dead_letter_topic
        self.bootstrap = bootstrap
        self.key = key
        self.delivery = delivery
        self.exactly_once = delivery is KafkaDelivery.EXACTLY_ONCE
        self.control_topic = control_topic
        self.transaction_timeout = transaction_timeout
        self.timeout = timeout
        self.client_config = dict(producer_config)
        self.commit_retry = commit_retry
        self.memory_bytes = memory_bytes
        self.message_max_bytes = int(self.client_config.get("message.max.bytes",
                                                            DEFAULT_MESSAGE_MAX_BYTES))

    def producer_settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "linger.ms": 5,
            **self.client_config,
            "bootstrap.servers": self.bootstrap,
            "enable.idempotence": True,
        }
        if self.exactly_once:
            settings["transaction.timeout.ms"] = int(self.transaction_timeout * 1000)
        return settings

    def _key(self, row: dict[str, Any]) -> bytes | None:
        """The record key of ``row``: its ``key`` column (if any), as bytes."""
        return None if self.key is None else _key_bytes(row.get(self.key))

    def encode_checked(self, records: pa.Table) -> list[EncodedRecord]:
        """Each row as key and value, and why the broker would refuse it: a value that
        cannot be encoded (found row by row when the whole table cannot be), or one
        larger than the producer's ``message.max.bytes``."""
        try:
            rows: list[dict[str, Any] | None] = list(records.to_pylist())
        except (ValueError, OverflowError, TypeError, pa.ArrowException):
            rows = [_one_row(records, position) for position in range(records.num_rows)]
        encoded: list[EncodedRecord] = []
        for position, row in enumerate(rows):
            if row is None:
                problem = _row_problem(records, position)
                encoded.append((None, b"", f"the record cannot be encoded: {problem}"))
                continue
            try:
                value = _json_value(row)
                key = self._key(row)
            except (ValueError, OverflowError, TypeError) as exc:
                encoded.append((None, b"", f"the record cannot be encoded: {exc}"))
                continue
            size = len(value) + len(key or b"")
            if size > self.message_max_bytes:
                encoded.append((key, value, f"the record is too large: {size} bytes, over "
                                            f"the producer's message.max.bytes of "
                                            f"{self.message_max_bytes}"))
            else:
                encoded.append((key, value, None))
        return encoded

    def dead_letter(self, *, key: bytes | None, value: bytes, problem: str,
                    checkpoint_id: int, subtask: int, position: int,
                    keep_value: bool) -> DeadLetter:
        """The dead letter of a refused record; its value only when the dead-letter
        topic can take it (a record refused for its size is known by its key and the
        headers, and stays in the job's staged interval until that is sent)."""
        assert self.dead_letter_topic is not None
        fits = keep_value and len(value) + len(key or b"") <= self.message_max_bytes
        facts = (problem, self.topic, str(checkpoint_id), str(subtask), str(position),
                 str(len(value)))
        return DeadLetter(topic=self.dead_letter_topic, value=value if fits and value else None,
                          headers=[(name, fact.encode()) for name, fact in
                                   zip(DEAD_LETTER_HEADERS, facts, strict=True)])

    # ------------------------------------------------------------------ the driver

    def prepare_on_driver(self, *, job_id: str) -> None:
        """The topic must exist (a typo would otherwise create nothing and hang every
        subtask); the control topic is created, compacted, when missing."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.client_config, "bootstrap.servers": self.bootstrap})
        try:
            metadata = admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise self._config_error(
                f"no Kafka broker at {self.bootstrap} answered within {self.timeout:g}s "
                f"({client_error_text(exc)})") from None
        if self.topic not in metadata.topics:
            raise self._config_error(f"topic {self.topic!r} does not exist at {self.bootstrap}")
        if self.dead_letter_topic is not None and self.dead_letter_topic not in metadata.topics:
            raise self._config_error(f"the dead-letter topic {self.dead_letter_topic!r} does "
                                     f"not exist at {self.bootstrap}")
        if not self.exactly_once:
            return
        topic = control_topic_of(self.control_topic, job_id)
        if topic in metadata.topics:
            self._check_control_topic(admin, topic)
        else:
            self._create_control_topic(admin, topic)

    def _create_control_topic(self, admin: Any, topic: str) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.cimpl import NewTopic

        new = NewTopic(topic, num_partitions=1, replication_factor=-1,
                       config={"cleanup.policy": "compact"})
        try:
            admin.create_topics([new], request_timeout=self.timeout)[topic].result(
                timeout=self.timeout)
            log.info("kafka sink: created the job's control topic %s", topic)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if error is None or error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise self._config_error(
                    f"cannot create the control topic {topic!r}: "
                    f"{client_error_text(exc)}") from None
            self._check_control_topic(admin, topic)

    def _check_control_topic(self, admin: Any, topic: str) -> None:
        """A control topic must keep each key's newest marker for ever: compacted, and
        nothing else (a ``delete`` policy drops markers after the retention time, and
        a restore would send their intervals again)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            ConfigResource,
            ResourceType,
        )

        resource = ConfigResource(ResourceType.TOPIC, topic)
        try:
            described = admin.describe_configs([resource], request_timeout=self.timeout)
            entries = described[resource].result(timeout=self.timeout)
        except KafkaException as exc:
            log.warning("kafka sink: could not read the configuration of the control topic "
                        "%s to check its cleanup policy: %s", topic, client_error_text(exc))
            return
        entry = entries.get("cleanup.policy")
        policy = "" if entry is None or entry.value is None else str(entry.value)
        if policy.replace(" ", "") != "compact":
            raise self._config_error(
                f"the control topic {topic!r} has cleanup.policy={policy or 'unknown'}; it "
                f"must be compact (and only compact), or commit markers are deleted and "
                f"their intervals sent again: kafka-configs --alter --entity-type topics "
                f"--entity-name {topic} --add-config cleanup.policy=compact")

    def prepare_restore(self, *, checkpoint_id: int, job_id: str = "", s3: Any = None) -> None:
        """Kafka cannot withdraw records: say so when a restore goes back past output
        that is already in the topic (they will be there twice)."""
        if not self.exactly_once:
            return
        try:
            through = read_markers(bootstrap=self.bootstrap,
                                   control_topic=control_topic_of(self.control_topic, job_id),
                                   job=job_id, timeout=self.timeout,
                                   client_config=self.client_config)
        except Exception as exc:  # a warning's check must not stop the restore
            log.warning("kafka sink: could not read %s to check the restore: %s",
                        self.control_topic, exc)
            return
        ahead = {subtask: cp for subtask, cp in through.items() if cp > checkpoint_id}
        if ahead:
            log.warning("kafka sink: restoring checkpoint %d, but the topic %s already has "
                        "the output of later checkpoints (subtask -> checkpoint: %s); Kafka "
                        "cannot withdraw records, so their records will be in it twice",
                        checkpoint_id, self.topic, dict(sorted(ahead.items())))

    def _config_error(self, problem: str) -> ConfigurationError:
        return ConfigurationError(setting="sinks.kafka", problem=problem)

    # ------------------------------------------------------------------ subtasks

    def _origin(self, job: str, *, context: SinkContext) -> _Transactions:
        """The committer of another job whose checkpoint this one restored: its
        transactional ids this subtask inherits are initialised at once (what that job
        left open is aborted, and its zombies are fenced), then its markers answer for
        its intervals."""
        origin = _Transactions(sink=self, context=dataclasses.replace(context, job_id=job))
        origin.start()
        return origin

    def open(self, *, context: SinkContext) -> SinkWriter:
        if not self.exactly_once:
            return _AtLeastOnceWriter(sink=self, context=context)
        transactions = _Transactions(sink=self, context=context)
        return WriteAheadWriter(send=transactions.send, committer=transactions,
                                committer_of=functools.partial(self._origin, context=context),
                                context=context,
                                staging=staging_path(None, context=context, sink=self.name),
                                commit_retry=self.commit_retry,
                                memory_bytes=self.memory_bytes, name=self.name)


def _json_value(row: dict[str, Any]) -> bytes:
    return json.dumps(row, separators=(",", ":"), default=str).encode()


def _one_row(records: pa.Table, position: int) -> dict[str, Any] | None:
    """Row ``position`` as a dict, or ``None`` when a value of it has no Python form."""
    try:
        [row] = records.slice(position, 1).to_pylist()
        return dict(row)
    except (ValueError, OverflowError, TypeError, pa.ArrowException):
        return None


def _row_problem(records: pa.Table, position: int) -> str:
    """Which column of row ``position`` has no Python form, and why."""
    for name in records.column_names:
        try:
            records.column(name).slice(position, 1).to_pylist()
        except (ValueError, OverflowError, TypeError, pa.ArrowException) as exc:
            return f"column {name!r}: {exc}"
    return "a value has no Python form"


def _key_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    return str(value).encode()


def kafka(topic: str, bootstrap: str, *, key: str | None = None, value_format: str = "json",
          delivery: str = "exactly-once", control_topic: str = DEFAULT_CONTROL_TOPIC,
          transaction_timeout: float = DEFAULT_TRANSACTION_TIMEOUT, timeout: float = 30.0,
          producer_config: Mapping[str, Any] | None = None,
          commit_retry: CommitRetry | None = None,
          memory_bytes: int = DEFAULT_MEMORY_BYTES, bad_records: str = "fail",
          dead_letter_topic: str | None = None) -> KafkaSink:
    """Write records to the Kafka ``topic`` at ``bootstrap``, each as a JSON object.

    ``key``: the column whose value (bytes, or its text) becomes the record key.
    ``delivery="exactly-once"`` (the default) sends a checkpoint interval in one
    transaction once the checkpoint completed, so ``read_committed`` readers see each
    record once, a checkpoint interval after it was produced; ``"at-least-once"``
    produces at once and may repeat records after a restore. ``control_topic`` holds
    the commit markers (created, compacted, on first use). ``transaction_timeout`` is
    the producers' ``transaction.timeout.ms`` in seconds (at most the broker's 15
    minutes). ``producer_config``: further client settings (security, compression).

    ``bad_records``: what to do with a record the broker will never take (larger than
    ``message.max.bytes``, a value JSON cannot hold): ``"fail"`` (the default) ends
    the job with one line naming the sink, the checkpoint and the record's position;
    ``"dead-letter"`` sends it to ``dead_letter_topic`` (which must exist) in the same
    transaction as the rest of its interval, with headers ``cjob.error``,
    ``cjob.topic``, ``cjob.checkpoint``, ``cjob.subtask``, ``cjob.position`` and
    ``cjob.value-bytes`` (a value too large for that topic too is left out), and
    counts it in ``cjob_job_sink_dead_letters_total``.
    """
    if not isinstance(topic, str) or not topic:
        raise PipelineDefinitionError(problem="kafka sink needs a topic name")
    if not isinstance(bootstrap, str) or not bootstrap.strip():
        raise PipelineDefinitionError(problem="kafka sink needs the brokers' bootstrap "
                                              "address (host:port)")
    if value_format != "json":
        raise PipelineDefinitionError(
            problem=f"kafka sink value_format must be 'json', got {value_format!r}")
    try:
        chosen = KafkaDelivery(delivery)
    except ValueError:
        raise PipelineDefinitionError(
            problem=f"kafka sink delivery must be one of "
                    f"{', '.join(d.value for d in KafkaDelivery)}, got {delivery!r}") from None
    if key is not None and (not isinstance(key, str) or not key):
        raise PipelineDefinitionError(problem=f"kafka sink key must be a column name, got "
                                              f"{key!r}")
    if not isinstance(control_topic, str) or not control_topic or control_topic == topic:
        raise PipelineDefinitionError(
            problem="kafka sink control_topic must be a topic name other than the output's")
    if (isinstance(transaction_timeout, bool) or not isinstance(transaction_timeout, int | float)
            or not 1.0 <= transaction_timeout <= MAX_TRANSACTION_TIMEOUT):
        raise PipelineDefinitionError(
            problem=f"kafka sink transaction_timeout must be 1 to {MAX_TRANSACTION_TIMEOUT:g} "
                    f"seconds (the broker's transaction.max.timeout.ms), got "
                    f"{transaction_timeout!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise PipelineDefinitionError(
            problem=f"kafka sink timeout must be a positive number of seconds, got {timeout!r}")
    if timeout >= transaction_timeout:
        # A transaction lives from the start of an interval's send to its commit, and
        # the sink waits up to ``timeout`` for the commit alone: with a shorter
        # transaction the broker would abort every large interval before its commit,
        # and the sink would send it again at each checkpoint until it stalled.
        raise PipelineDefinitionError(
            problem=f"kafka sink transaction_timeout ({transaction_timeout:g}s) must be longer "
                    f"than its timeout ({timeout:g}s): the broker would abort a transaction "
                    f"the sink is still waiting to commit")
    try:
        bad = BadRecords(bad_records)
    except ValueError:
        raise PipelineDefinitionError(
            problem=f"kafka sink bad_records must be one of "
                    f"{', '.join(b.value for b in BadRecords)}, got {bad_records!r}") from None
    if bad is BadRecords.DEAD_LETTER and chosen is not KafkaDelivery.EXACTLY_ONCE:
        raise PipelineDefinitionError(
            problem="kafka sink bad_records='dead-letter' needs delivery='exactly-once' "
                    "(at-least-once sends records as they come, with no interval to "
                    "send again without the refused one)")
    if bad is BadRecords.DEAD_LETTER and (not isinstance(dead_letter_topic, str)
                                          or not dead_letter_topic):
        raise PipelineDefinitionError(
            problem="kafka sink bad_records='dead-letter' needs a dead_letter_topic")
    if dead_letter_topic is not None and bad is not BadRecords.DEAD_LETTER:
        raise PipelineDefinitionError(
            problem="kafka sink dead_letter_topic is used only with "
                    "bad_records='dead-letter'")
    if dead_letter_topic is not None and dead_letter_topic in (topic, control_topic):
        raise PipelineDefinitionError(
            problem="kafka sink dead_letter_topic must be a topic other than the output "
                    "and the control topic")
    settings = dict(producer_config or {})
    for name in settings:
        reason = _OWN_SETTINGS.get(name)
        if reason is not None:
            raise PipelineDefinitionError(
                problem=f"kafka sink producer_config may not set {name!r}: {reason}")
    return KafkaSink(topic=topic, bootstrap=bootstrap.strip(), key=key, delivery=chosen,
                     control_topic=control_topic, transaction_timeout=float(transaction_timeout),
                     timeout=float(timeout), producer_config=settings,
                     commit_retry=commit_retry or CommitRetry(), memory_bytes=memory_bytes,
                     bad_records=bad, dead_letter_topic=dead_letter_topic)
