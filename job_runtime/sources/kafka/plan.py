"""The Kafka source's plan: which partitions it reads and from which offset (bounded:
up to which), fixed at the job's first start and staged as JSON so that every attempt
and every subtask reads the same one (see :mod:`job_runtime.sources.kafka`).

A plan is named and written from the four choices that make it one input's
(``bootstrap``, ``topics``, ``start``, ``bounded``), passed as values, so this module
knows nothing of the source that holds them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Sequence

from cjob_checkpoint.storage.file_system import join_uri
from job_runtime.errors import ConfigurationError

PLAN_VERSION = 2
"""Version 2 adds the cluster's id; version 1 plans are read with none."""
PLAN_VERSIONS = (1, 2)
BEGINNING = -2
"""The client's logical offset of a partition's first record (``OFFSET_BEGINNING``):
where a restored partition of a known topic that the checkpoint does not hold starts,
without asking the broker for its earliest offset."""
DISCOVERED_INDEX_BASE = 1_000_000
"""A partition found while the job runs is split ``(t + 1) * base + partition``, ``t``
the topic's place in ``topics``: an index that depends on what the partition is, not
on when a subtask saw it, far above the plan's (which count from 0)."""


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


def discovered_index(place: int, partition: int) -> int:
    """The split index of a partition found while the job runs (see
    :data:`DISCOVERED_INDEX_BASE`)."""
    return (place + 1) * DISCOVERED_INDEX_BASE + partition


def plan_uri(staging_uri: str, *, bootstrap: str, topics: Sequence[str], start: str | int,
             bounded: bool) -> str:
    """Where the plan is staged: named by everything that makes it this input's."""
    brokers = sorted({server.strip() for server in bootstrap.split(",") if server.strip()})
    choice = json.dumps({"bootstrap": brokers, "topics": list(topics),
                         "start": start, "bounded": bounded}, sort_keys=True)
    digest = hashlib.sha256(choice.encode()).hexdigest()[:16]
    return join_uri(staging_uri, "kafka", f"plan-{digest}.json")


def plan_bytes(plan: list[KafkaPartition], *, bootstrap: str, topics: Sequence[str],
               start: str | int, bounded: bool) -> bytes:
    return json.dumps({
        "version": PLAN_VERSION, "bootstrap": bootstrap, "topics": list(topics),
        "start": start, "bounded": bounded,
        "clusterId": plan[0].cluster if plan else None,
        "plannedAt": int(time.time() * 1000),
        "partitions": [{"topic": part.topic, "partition": part.partition,
                        "start": part.start, "end": part.end} for part in plan],
    }, indent=1).encode()


def parse_plan(data: bytes, *, uri: str) -> list[KafkaPartition]:
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


def describe_offsets(plan: list[KafkaPartition]) -> str:
    return ", ".join(f"{p.topic}/{p.partition}@{p.start}" + ("" if p.end is None else
                                                           f"..{p.end}") for p in plan[:8]) + (
        f" and {len(plan) - 8} more" if len(plan) > 8 else "")
