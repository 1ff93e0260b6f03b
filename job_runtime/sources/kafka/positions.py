"""Where a Kafka reader continues, as the checkpoint keeps it, and how a restore
matches the checkpoint's positions to the partitions of the plan it runs with.

A position names its cluster, topic and partition (never a bare split index), so a
new plan (topics added, removed or reordered, ``start`` or ``bounded`` changed)
continues every partition the checkpoint knows from its offset, whatever index the
plan gives it (:func:`restore_splits`). No broker is asked.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from job_runtime.errors import UserCodeError
from job_runtime.sources.kafka.plan import BEGINNING, KafkaPartition, discovered_index
from job_runtime.sources.source_contract import RestoredSplit, Split

log = logging.getLogger(__name__)


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


def restore_splits(splits: Sequence[Split], positions: Mapping[int, Any], *,
                   topics: Sequence[str], bounded: bool, bootstrap: str, operator: str,
                   subtask: int) -> list[RestoredSplit]:
    """The plan's partitions (``splits``) and those only the checkpoint knows, each
    continuing from the checkpoint's offset of *that partition*, whatever index it had
    there.

    A partition the checkpoint holds and the plan does not (discovered by an earlier
    attempt) is rebuilt from its position; one the plan lists and the checkpoint does
    not starts from its beginning when the checkpoint read its topic (the partition was
    added since), else from the plan's start (a topic new to the job). ``operator`` and
    ``subtask`` name the source in the errors of a position that cannot be matched.
    """
    by_partition, unnamed = _checkpointed(positions, splits=splits, operator=operator,
                                          subtask=subtask)
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
            restored.append(RestoredSplit(split=split, position=_continued(
                position, part=part, bootstrap=bootstrap, operator=operator,
                subtask=subtask)))
        elif part.topic in known_topics:
            restored.append(RestoredSplit(split=Split(index=split.index, description=(
                dataclasses.replace(part, start=BEGINNING))), position=None))
        else:
            restored.append(RestoredSplit(split=split, position=None))
    planned_cluster = next((s.description.cluster for s in splits), None)
    dropped: list[str] = []
    for (topic, partition), position in sorted(by_partition.items()):
        if topic not in topics:
            dropped.append(f"{topic}/{partition}")
            continue
        part = KafkaPartition(topic=topic, partition=partition, start=position.offset,
                              end=position.end if bounded else None,
                              cluster=position.cluster or planned_cluster)
        restored.append(RestoredSplit(
            split=Split(index=discovered_index(topics.index(topic), partition),
                        description=part),
            position=_continued(position, part=part, bootstrap=bootstrap,
                                operator=operator, subtask=subtask)))
    if dropped:
        log.warning("kafka source: the checkpoint holds positions of %s, whose topics the "
                    "job no longer reads: they are not read", ", ".join(dropped[:10]))
    return restored


def _checkpointed(positions: Mapping[int, Any], *, splits: Sequence[Split], operator: str,
                  subtask: int) -> tuple[dict[tuple[str, int], KafkaPosition], set[int]]:
    """The checkpoint's positions by partition; and the indexes of the plan's splits it
    holds without naming a partition (``None``: not read yet, written before positions
    named theirs). Two positions of one partition (a plan that read it under two
    indexes) keep the farther."""
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
            raise UserCodeError(operator=operator, subtask=subtask, details=(
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


def _continued(position: KafkaPosition, *, part: KafkaPartition, bootstrap: str,
               operator: str, subtask: int) -> dict[str, Any]:
    """``position`` for the partition ``part`` of the plan; refused when the two are at
    different clusters."""
    if position.cluster and part.cluster and position.cluster != part.cluster:
        raise UserCodeError(operator=operator, subtask=subtask, details=(
            f"the checkpoint's position of topic {position.topic!r} partition "
            f"{position.partition} is at Kafka cluster {position.cluster!r}, but "
            f"{bootstrap} is cluster {part.cluster!r}: offsets of one cluster mean "
            f"nothing at another"))
    return dataclasses.replace(position, cluster=part.cluster or position.cluster).to_json()
