"""The exactly-once Kafka sink's transactional sender: one transaction per interval.

Each pending interval is sent with its commit marker in one Kafka transaction under a
stable transactional id (``cjob-<job>-<subtask>``); its initialisation fences zombies of
older attempts and aborts what they left open. No failure leaves a transaction open.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

import pyarrow as pa

from job_runtime.errors import client_error_text
from job_runtime.sinks.arrival import TransactionalSender
from job_runtime.sinks.commit import SinkFencedError
from job_runtime.sinks.failures import (
    BadRecords,
    RejectedRecordError,
)
from job_runtime.sinks.kafka.markers import (
    LEGACY_MARKER_VERSION,
    MARKER_VERSION,
    CommitMarker,
    control_topic_of,
    newest_by_subtask,
    read_control,
    transactional_id,
)
from job_runtime.sinks.kafka.refusals import EncodedRecord, permanent, produce, refusal
from job_runtime.sinks.kafka.target import KafkaTarget
from job_runtime.sinks.sink_contract import SinkContext

log = logging.getLogger(__name__)


class Transactions(TransactionalSender):
    """The exactly-once Kafka writer's transactional sender: an interval and its commit
    marker go out in one transaction, and the markers say which intervals arrived."""

    def __init__(self, *, sink: KafkaTarget, context: SinkContext) -> None:
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
            if error is not None and permanent(error):
                refusals.setdefault(position, refusal(error))

        try:
            producer.begin_transaction()
            for position, (key, value, _) in enumerate(encoded):
                on_delivery = functools.partial(delivered, position)
                if position in refused:
                    letter = sink.dead_letter(key=key, value=value, problem=refused[position],
                                              checkpoint_id=checkpoint_id, subtask=subtask,
                                              position=position,
                                              keep_value=position not in oversized)
                    produce(producer, topic=letter.topic, key=key, value=letter.value,
                             headers=letter.headers, on_delivery=on_delivery)
                    continue
                try:
                    produce(producer, topic=sink.topic, key=key, value=value,
                             on_delivery=on_delivery)
                except KafkaException as exc:  # refused before it left this process
                    error = exc.args[0] if exc.args else None
                    if error is None or not permanent(error):
                        raise
                    refusals.setdefault(position, refusal(error))
            if not refusals:
                produce(producer, topic=marker_topic, key=marker.key, value=marker.value())
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
