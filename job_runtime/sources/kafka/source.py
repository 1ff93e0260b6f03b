"""``kafka(topics, bootstrap, ...)``: the Kafka source, its arguments checked when the
pipeline is built, and :class:`KafkaSource`, which holds them and puts the package's
parts together: the plan (staged on the driver, read by every subtask), the brokers,
the restore's matching of positions, and one reader per partition."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence, Set
from typing import Any

from cjob_checkpoint.storage.factory import get_filesystem
from job_runtime.errors import PipelineDefinitionError, UserCodeError
from job_runtime.sources.kafka.brokers import Brokers
from job_runtime.sources.kafka.client_log import CLIENT_LOG
from job_runtime.sources.kafka.dead_letters import DeadLetters
from job_runtime.sources.kafka.decode import METADATA_COLUMNS, RecordDecoder
from job_runtime.sources.kafka.plan import (
    KafkaPartition,
    describe_offsets,
    parse_plan,
    plan_bytes,
    plan_uri,
)
from job_runtime.sources.kafka.positions import KafkaPosition, restore_splits
from job_runtime.sources.kafka.reader import KafkaReader
from job_runtime.sources.source_contract import (
    RestoredSplit,
    Source,
    SourceContext,
    Split,
    SplitReader,
)
from job_runtime.sources.staging import DriverStaging

log = logging.getLogger(__name__)

STARTS = ("earliest", "latest")
VALUE_FORMATS = ("raw", "json")
BAD_RECORDS = ("fail", "dead-letter")
GROUP_ID_PREFIX = "cjob-"
"""The consumers' ``group.id`` is this and the job's id unless ``consumer_config``
names one. The consumers are assigned their partitions and never join the group: it
only holds the offsets of completed checkpoints, for monitoring tools."""
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

_OWN_SETTINGS = {
    "bootstrap.servers": "the bootstrap argument gives it",
    "isolation.level": "the source reads committed records only (read_committed)",
    "enable.auto.commit": "the checkpoint holds the offsets and the source commits none",
    "enable.auto.offset.store": "the checkpoint holds the offsets and the source commits none",
    "enable.partition.eof": "the source needs to see where a partition ends",
    "auto.offset.reset": "an offset no longer on the broker fails the job instead of "
                         "skipping or replaying records",
}


class KafkaSource(Source):
    name = "kafka"
    metadata_columns = METADATA_COLUMNS

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
        return plan_uri(staging_uri, bootstrap=self.bootstrap, topics=self.topics,
                        start=self.start, bounded=self.bounded)

    def prepare_on_driver(self, *, spark_context: Any, staging: DriverStaging) -> None:
        """At the job's first start, resolve the plan and stage it; later attempts
        find it staged and ask the brokers nothing (a broker down during a restart
        only makes the readers wait)."""
        uri = self._plan_uri(staging.uri)
        fs = get_filesystem(uri)
        if fs.exists(uri):
            parse_plan(fs.read_bytes(uri), uri=uri)
            return
        plan = self.resolve_plan()
        fs.write_bytes(uri, plan_bytes(plan, bootstrap=self.bootstrap, topics=self.topics,
                                       start=self.start, bounded=self.bounded))
        log.info("kafka source: %d partitions of %s planned, from %s", len(plan),
                 ", ".join(self.topics), describe_offsets(plan))

    def _plan(self, context: SourceContext) -> list[KafkaPartition]:
        uri = self._plan_uri(context.staging_uri)
        plan = self._plans.get(uri)
        if plan is None:
            fs = get_filesystem(uri, s3=context.s3)
            plan = parse_plan(fs.read_bytes(uri), uri=uri) if fs.exists(uri) else \
                self.resolve_plan()
            self._plans[uri] = plan
        return plan

    def _brokers(self) -> Brokers:
        return Brokers(bootstrap=self.bootstrap, timeout=self.timeout,
                       settings=self.client_settings())

    def resolve_plan(self) -> list[KafkaPartition]:
        """The partitions of ``topics`` and their offsets, as the brokers report them now."""
        return self._brokers().resolve_plan(topics=self.topics, start=self.start,
                                            bounded=self.bounded,
                                            dead_letter_topic=self.dead_letter_topic)

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
        plan = self._plan(context)
        return self._brokers().added_partitions(topics=self.topics, plan=plan, known=known)

    def start_position(self, split: Split) -> dict[str, Any]:
        """A partition not read yet is kept as what it is, from its start: a restore
        under a new plan still knows which partition it was."""
        part: KafkaPartition = split.description
        return KafkaPosition(topic=part.topic, partition=part.partition, offset=part.start,
                             end=part.end, cluster=part.cluster).to_json()

    def restore_splits(self, splits: Sequence[Split], positions: Mapping[int, Any], *,
                       context: SourceContext) -> list[RestoredSplit]:
        """The plan's partitions and those only the checkpoint knows, each continuing
        from the checkpoint's offset of *that partition*, whatever index it had there
        (:func:`~job_runtime.sources.kafka.positions.restore_splits`; no broker is
        asked)."""
        return restore_splits(splits, positions, topics=self.topics, bounded=self.bounded,
                              bootstrap=self.bootstrap, operator=self.name,
                              subtask=context.subtask)

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
        return KafkaReader(
            part=part, offset=offset, end=end if self.bounded else None,
            batch_size=self.batch_size or context.batch_size,
            consumer_settings=self.consumer_settings(job_id=context.job_id),
            decoder=RecordDecoder(value_format=self.value_format, operator=self.name,
                                  part=part, subtask=context.subtask, columns=context.columns),
            dead_letters=self._dead_letters if self.bad_records == "dead-letter" else None,
            commit_offsets=self.commit_offsets)

    def _dead_letters(self) -> DeadLetters:
        """The producer of a reader's dead letters, made at its first bad record."""
        assert self.dead_letter_topic is not None
        return DeadLetters(topic=self.dead_letter_topic, client_settings=self.client_settings())

    # ------------------------------------------------------------------ clients

    def consumer_settings(self, *, job_id: str = "") -> dict[str, Any]:
        """``job_id`` names the consumer group (``cjob-<job id>``) the checkpoints'
        offsets are copied to, unless ``consumer_config`` names one."""
        return {"group.id": GROUP_ID_PREFIX + (job_id or "job"), **CONSUMER_DEFAULTS,
                **self.consumer_config,
                "bootstrap.servers": self.bootstrap, "isolation.level": "read_committed",
                "enable.auto.commit": False, "enable.auto.offset.store": False,
                "enable.partition.eof": True, "auto.offset.reset": "error",
                "logger": CLIENT_LOG}

    def client_settings(self) -> dict[str, Any]:
        """The user's client settings (security, ...) for a client that is not the
        consumer: the admin client, the dead-letter producer."""
        settings = {k: v for k, v in self.consumer_config.items() if k != "group.id"}
        return {**settings, "bootstrap.servers": self.bootstrap, "logger": CLIENT_LOG}



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
