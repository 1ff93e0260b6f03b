"""``kafka(topic, bootstrap, ...)``: the Kafka sink, its arguments checked at build
time, the topics checked or created on the driver, and records encoded (a record the
broker would refuse found before it is sent, where it can be)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import logging
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from job_runtime.errors import ConfigurationError, PipelineDefinitionError, client_error_text
from job_runtime.sinks.commit import CommitRetry
from job_runtime.sinks.failures import (
    BadRecords,
)
from job_runtime.sinks.kafka.at_least_once_writer import AtLeastOnceWriter
from job_runtime.sinks.kafka.markers import DEFAULT_CONTROL_TOPIC, control_topic_of, read_markers
from job_runtime.sinks.kafka.refusals import (
    DEAD_LETTER_HEADERS,
    DEFAULT_MESSAGE_MAX_BYTES,
    DeadLetter,
    EncodedRecord,
)
from job_runtime.sinks.kafka.transactions import Transactions
from job_runtime.sinks.sink_contract import Sink, SinkContext, SinkWriter
from job_runtime.sinks.write_ahead import (
    DEFAULT_MEMORY_BYTES,
    WriteAheadWriter,
    staging_path,
)

log = logging.getLogger(__name__)


DEFAULT_TRANSACTION_TIMEOUT = 60.0


MAX_TRANSACTION_TIMEOUT = 900.0
"""The broker's default ``transaction.max.timeout.ms`` (15 minutes)."""






_OWN_SETTINGS = {
    "transactional.id": "the sink derives stable ids from the job and the subtask",
    "enable.idempotence": "the sink needs it on, and transactions require it",
    "transaction.timeout.ms": "use the sink's transaction_timeout",
    "bootstrap.servers": "use the sink's bootstrap",
}


class KafkaDelivery(enum.StrEnum):
    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"


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

    def _origin(self, job: str, *, context: SinkContext) -> Transactions:
        """The committer of another job whose checkpoint this one restored: its
        transactional ids this subtask inherits are initialised at once (what that job
        left open is aborted, and its zombies are fenced), then its markers answer for
        its intervals."""
        origin = Transactions(sink=self, context=dataclasses.replace(context, job_id=job))
        origin.start()
        return origin

    def open(self, *, context: SinkContext) -> SinkWriter:
        if not self.exactly_once:
            return AtLeastOnceWriter(sink=self, context=context)
        transactions = Transactions(sink=self, context=context)
        return WriteAheadWriter(committer=transactions,
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
