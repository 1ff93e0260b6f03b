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

from job_runtime.sinks.commit import SinkFencedError
from job_runtime.sinks.kafka.markers import (
    DEFAULT_CONTROL_TOPIC,
    CommitMarker,
    control_topic_of,
    read_markers,
    transactional_id,
)
from job_runtime.sinks.kafka.refusals import DeadLetter
from job_runtime.sinks.kafka.sink import KafkaDelivery, KafkaSink, kafka

__all__ = ["DEFAULT_CONTROL_TOPIC", "CommitMarker", "DeadLetter", "KafkaDelivery", "KafkaSink",
           "SinkFencedError", "control_topic_of", "kafka", "read_markers", "transactional_id"]
