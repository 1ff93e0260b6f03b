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

The package, one role a module: ``source`` (``kafka()``, :class:`KafkaSource`: the
arguments, and the parts put together), ``plan`` (:class:`KafkaPartition`, the staged
plan), ``brokers`` (what the admin client asks: the plan, offsets, added partitions),
``positions`` (:class:`KafkaPosition`, a restore's matching), ``reader`` (one consumer
per partition), ``decode`` (records as Arrow columns), ``dead_letters`` and
``client_log`` (the clients' own log lines).
"""

from job_runtime.sources.kafka.dead_letters import DEAD_LETTER_HEADERS
from job_runtime.sources.kafka.decode import TIMESTAMP_NOT_AVAILABLE
from job_runtime.sources.kafka.plan import (
    BEGINNING,
    DISCOVERED_INDEX_BASE,
    KafkaPartition,
    discovered_index,
)
from job_runtime.sources.kafka.positions import KafkaPosition
from job_runtime.sources.kafka.reader import POLL_SECONDS
from job_runtime.sources.kafka.source import KafkaSource, kafka

__all__ = ["BEGINNING", "DEAD_LETTER_HEADERS", "DISCOVERED_INDEX_BASE", "POLL_SECONDS",
           "TIMESTAMP_NOT_AVAILABLE", "KafkaPartition", "KafkaPosition", "KafkaSource",
           "discovered_index", "kafka"]
