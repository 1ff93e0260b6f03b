"""What the Kafka source asks the brokers, through an admin client: the topics and
their partitions, offsets, the plan of a first start and partitions added since.

Only the driver at a first start (and a subtask that finds no plan) resolves a plan;
discovery asks again while the job runs. A broker that does not answer, or an unknown
topic, is a :class:`~job_runtime.errors.ConfigurationError` in one line; a partition
whose leader is still moving is asked again until ``timeout``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any

from job_runtime.errors import ConfigurationError, client_error_text
from job_runtime.sources.kafka.plan import KafkaPartition, discovered_index
from job_runtime.sources.source_contract import Split

if TYPE_CHECKING:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._listoffsets import OffsetSpec

    # ClusterMetadata's documented home is confluent_kafka.admin, whose stubs do not
    # re-export it.
    from confluent_kafka.admin._metadata import ClusterMetadata

TRANSIENT_ERRORS = frozenset({"NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE",
                              "UNKNOWN_TOPIC_OR_PART", "REQUEST_TIMED_OUT", "_TRANSPORT",
                              "_TIMED_OUT"})
"""Offset-lookup errors that asking again cures: a partition whose leader is not known
yet (a topic just created, a broker restarting) or a request that timed out. The client
does not mark all of them retriable in its admin answers."""


def _transient(exc: BaseException) -> bool:
    """Whether a client error goes away by asking again (leadership still moving)."""
    from confluent_kafka import KafkaError

    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError):
        return False
    return bool(error.retriable()) or error.name() in TRANSIENT_ERRORS


def _config_error(problem: str) -> ConfigurationError:
    return ConfigurationError(setting="sources.kafka", problem=problem)


class Brokers:
    """The brokers at ``bootstrap``, each question answered within ``timeout`` seconds;
    ``settings`` are the admin client's (the user's security settings among them)."""

    def __init__(self, *, bootstrap: str, timeout: float, settings: Mapping[str, Any]) -> None:
        self._bootstrap = bootstrap
        self._timeout = timeout
        self._settings = dict(settings)

    def _admin(self) -> AdminClient:
        from confluent_kafka.admin import AdminClient

        return AdminClient(self._settings)

    def resolve_plan(self, *, topics: Sequence[str], start: str | int, bounded: bool,
                     dead_letter_topic: str | None) -> list[KafkaPartition]:
        """The partitions of ``topics`` and their offsets, as the brokers report them now."""
        from confluent_kafka import TopicPartition

        # OffsetSpec's documented home is confluent_kafka.admin, whose stubs do not
        # re-export it; its factories are untyped.
        from confluent_kafka.admin._listoffsets import OffsetSpec

        admin = self._admin()
        metadata = self.cluster_metadata(admin)
        cluster = metadata.cluster_id or None
        partitions: list[TopicPartition] = []
        for topic in topics:
            described = metadata.topics.get(topic)
            if described is None:
                raise _config_error(f"topic {topic!r} does not exist at {self._bootstrap}")
            if described.error is not None:
                raise _config_error(f"topic {topic!r}: {described.error.str()}")
            partitions.extend(TopicPartition(topic, p) for p in sorted(described.partitions))
        if dead_letter_topic is not None and dead_letter_topic not in metadata.topics:
            raise _config_error(f"the dead-letter topic {dead_letter_topic!r} does "
                                f"not exist at {self._bootstrap}")
        latest: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        start_spec: OffsetSpec = (
            OffsetSpec.for_timestamp(start) if isinstance(start, int)
            else OffsetSpec.earliest() if start == "earliest"  # type: ignore[no-untyped-call]
            else latest)
        starts = self.offsets(admin, partitions, start_spec)
        # After the starts, so that a start resolved to "latest" is never past the end.
        ends = self.offsets(admin, partitions, latest) \
            if bounded or isinstance(start, int) else {}
        plan: list[KafkaPartition] = []
        for tp in partitions:
            key = (tp.topic, tp.partition)
            first = starts[key]
            if first < 0:  # no record at or after the start timestamp: the end
                first = ends[key]
            end = ends[key] if bounded else None
            plan.append(KafkaPartition(topic=tp.topic, partition=tp.partition,
                                       start=first if end is None else min(first, end),
                                       end=end, cluster=cluster))
        return plan

    def added_partitions(self, *, topics: Sequence[str], plan: list[KafkaPartition],
                         known: Set[int]) -> list[Split]:
        """Partitions ``topics`` gained since ``plan`` that are not among the ``known``
        splits, each from its earliest offset, under its :func:`discovered_index`."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin._listoffsets import OffsetSpec

        planned = {(part.topic, part.partition) for part in plan}
        cluster = plan[0].cluster if plan else None
        admin = self._admin()
        metadata = self.cluster_metadata(admin)
        found: dict[tuple[str, int], int] = {}
        for place, topic in enumerate(topics):
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
        starts = self.offsets(admin, [TopicPartition(t, p) for t, p in found], earliest)
        return [Split(index=index, description=KafkaPartition(
                    topic=topic, partition=partition, start=starts[(topic, partition)],
                    end=None, cluster=cluster))
                for (topic, partition), index in found.items()]

    def cluster_metadata(self, admin: AdminClient) -> ClusterMetadata:
        """The brokers' topics and partitions, or a one-line error when none answers."""
        from confluent_kafka import KafkaException

        try:
            return admin.list_topics(timeout=self._timeout)
        except KafkaException as exc:
            raise _config_error(
                f"no Kafka broker at {self._bootstrap} answered within {self._timeout:g}s "
                f"({client_error_text(exc)})") from None

    def offsets(self, admin: AdminClient, partitions: list[TopicPartition],
                spec: OffsetSpec) -> dict[tuple[str, int], int]:
        """Each partition's offset for ``spec``, asking again while its leader is unknown.

        A topic created a moment ago, or one whose leader's broker is restarting,
        answers "not leader" or "leader not available" until the leadership settles:
        that is a wait, not a mistake of the user's, so only the partitions that gave a
        transient error are asked again, until ``timeout``.
        """
        from confluent_kafka import IsolationLevel

        deadline = time.monotonic() + self._timeout
        pause = 0.1
        found: dict[tuple[str, int], int] = {}
        pending = list(partitions)
        while pending:
            futures = admin.list_offsets({tp: spec for tp in pending},
                                         isolation_level=IsolationLevel.READ_COMMITTED,
                                         request_timeout=self._timeout)
            retry: list[TopicPartition] = []
            for tp, future in futures.items():
                try:
                    info = future.result(timeout=self._timeout + 5.0)
                except Exception as exc:
                    if _transient(exc) and time.monotonic() + pause < deadline:
                        retry.append(tp)
                        continue
                    raise _config_error(
                        f"cannot read the offsets of topic {tp.topic!r} partition "
                        f"{tp.partition} at {self._bootstrap}: {client_error_text(exc)}"
                    ) from None
                found[(tp.topic, tp.partition)] = int(info.offset)
            if retry:
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
            pending = retry
        return found
