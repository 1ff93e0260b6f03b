"""The exactly-once Kafka sink's commit markers: what a job's control topic says.

A marker names a (job, subtask) and the newest checkpoint whose interval it sent, in
the same transaction as the interval's records; a ``read_committed`` read of the job's
own compacted control topic (``<base>.<job>``) therefore tells which intervals are in
the output. Version 2 markers carry the writer and an HMAC under a key that lives only
in the job's checkpoints, so a marker anyone else wrote is ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import logging
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

log = logging.getLogger(__name__)


MARKER_VERSION = 2


LEGACY_MARKER_VERSION = 1
"""Markers of the shared control topic, as releases before per-job topics wrote them."""


MAX_TOPIC_NAME = 249


_TOPIC_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


DEFAULT_CONTROL_TOPIC = "cjob-commits"


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
        if not topic_readable(described, topic=control_topic):
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


class ControlTopicUnavailable(RuntimeError):
    """The control topic exists but cannot be read now (a broker just back, a partition
    without a leader): its markers are unknown, which is not the same as none."""


def topic_readable(described: Any, *, topic: str) -> bool:
    """Whether the control topic's metadata (``list_topics``) allows reading it: False
    when the topic does not exist (no interval of the job was ever sent); raises
    :class:`ControlTopicUnavailable` when it exists but its metadata carries an error.

    Reading "no markers" from a topic that only could not be read would call intervals
    that were sent lost, and fail a restore that a retry a moment later completes.
    """
    from confluent_kafka import KafkaError

    if described is None:
        return False
    error = described.error
    if error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return False
    problems = [str(error)] if error is not None else []
    problems += [f"partition {number}: {partition.error}"
                 for number, partition in sorted(described.partitions.items())
                 if partition.error is not None]
    if problems:
        raise ControlTopicUnavailable(f"the control topic {topic} cannot be read now: "
                                      f"{'; '.join(problems)}")
    return True


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
