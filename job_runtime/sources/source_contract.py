"""What every source provides: deterministic splits and readers that remember positions.

A source is cut into splits once, in the same way in every process (so a subtask
can rebuild the list without asking anybody). Split ``s`` is read by subtask
``s % parallelism``. A reader's ``position`` is what a checkpoint stores; on
restore a new reader starts from it, whatever the new parallelism is.

An input that grows while the job runs (a Kafka topic given partitions) can add
splits later: :meth:`Source.discover` finds them, under indexes derived from what
they are rather than from when they were found, so every subtask assigns them alike;
a checkpoint keeps their positions like any other. An :attr:`Source.unbounded`
source never ends, so a subtask that holds none of its splits waits for one instead
of finishing: any subtask may gain splits at any time (discovery, a restore at
another parallelism).

A restore hands the checkpoint's positions to :meth:`Source.restore_splits`, which
says which split each continues: by index for sources whose splits never change,
by what a split *is* for those whose listing may change between runs (a Kafka
position names its topic and partition, whatever index a new plan gives it).
"""

from __future__ import annotations

import abc
import dataclasses
import logging
from collections.abc import Mapping, Sequence, Set
from typing import Any

from job_runtime.records import Batch
from job_runtime.sources.staging import DriverStaging

log = logging.getLogger(__name__)

RECORD_BATCH_SIZE = 8192
"""Rows per source batch when a Python function sees every record (``map``,
``filter``, ``flat_map``, ``reduce``, ``process``): at about a million records a
second, a batch then holds a barrier back by milliseconds."""


@dataclasses.dataclass(frozen=True)
class Split:
    index: int
    description: Any


@dataclasses.dataclass(frozen=True)
class RestoredSplit:
    """A split a restored subtask lists, and the position it continues from (``None``:
    from the split's start)."""

    split: Split
    position: Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourceBacklog:
    """How far a reader of one partition of a log (a Kafka topic) is behind its end:
    the driver's ``cjob_job_source_lag_records``. Crosses the process boundary inside
    a subtask's progress report."""

    topic: str
    partition: int
    records: int

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "records": self.records}

    @classmethod
    def from_json(cls, data: Any) -> SourceBacklog:
        return cls(topic=str(data["topic"]), partition=int(data["partition"]),
                   records=int(data["records"]))


class SplitReader(abc.ABC):
    @abc.abstractmethod
    def read_batch(self) -> Batch | None:
        """The next batch, or ``None`` once the split is exhausted."""

    @abc.abstractmethod
    def position(self) -> Any:
        """A picklable position from which a new reader continues exactly here."""

    def backlog(self) -> SourceBacklog | None:
        """Records between the position and the split's end as last seen, for a split
        that has such an end (a log's partition); ``None`` otherwise or when unknown.
        Called from the progress thread: it must not block."""
        return None

    def checkpoint_completed(self, position: Any) -> None:  # noqa: B027 - optional hook
        """A checkpoint that holds ``position`` for this split completed: a source may
        tell its system how far the job got (Kafka's consumer-group offsets). Never
        what a restore reads: the checkpoint is."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release files or connections."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourceContext:
    """What a source needs to know about where it runs."""

    subtask: int
    parallelism: int
    staging_uri: str
    job_id: str = ""
    s3: Any = None
    batch_size: int = RECORD_BATCH_SIZE
    """Rows per batch for a source the job did not give a size: larger when no
    Python function of the pipeline sees single records (see
    ``job_runtime.execution.stages.source_batch_size``)."""
    columns: frozenset[str] | None = None
    """The only columns the pipeline reads, when it reads named columns only (see
    ``job_runtime.execution.stages.source_columns``); ``None``: every column. A source
    may leave the others out of its batches."""
    staged_inputs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Input name -> where the staged copy the job reads was published (see
    :mod:`job_runtime.sources.staged_dataset`); the driver decides it once."""


class Source(abc.ABC):
    """A description of input, created in the user's ``build`` function."""

    name: str = "source"
    rate: float | None = None
    metadata_columns: tuple[str, ...] = ()
    """Columns the source adds that describe where a record came from rather than the
    record (Kafka's partition and offset): a table built from the source leaves them
    out of its rows."""
    prepares_on_driver: bool = False
    """Whether :meth:`prepare_on_driver` runs a Spark job. A warm standby launches its
    barrier stage before it is promoted only for a source that does not: that job
    would wait for task slots the parked stage holds."""

    @abc.abstractmethod
    def splits(self, *, context: SourceContext) -> list[Split]:
        """All splits of the input, identical in every process."""

    @abc.abstractmethod
    def open(self, split: Split, position: Any, *, context: SourceContext) -> SplitReader:
        """A reader of ``split`` starting at ``position`` (``None`` for the beginning)."""

    @property
    def reads_splits_together(self) -> bool:
        """Whether a subtask keeps a reader of each of its splits open and reads them in
        turn (splits that never end, or whose records should interleave in time), rather
        than one split after the other."""
        return False

    @property
    def unbounded(self) -> bool:
        """Whether the input never ends (a log read as it grows). A subtask of such a
        source never finishes: one that holds no split now waits for one, since it
        may gain splits at any time, and tells its downstream it is idle."""
        return False

    @property
    def staged_name(self) -> str | None:
        """The name the source stages what it reads under in the job's staging area
        (``None``: it stages nothing by name). Two inputs of one job may not share
        one: the second would read what the first staged."""
        return None

    def reads_together(self, split: int) -> bool:
        """:attr:`reads_splits_together` for split ``split`` (a union answers per input)."""
        return self.reads_splits_together

    @property
    def discovery_interval(self) -> float | None:
        """Seconds between looks for splits the input gained while the job runs (see
        :meth:`discover`); ``None``: its splits are fixed."""
        return None

    def discover(self, *, context: SourceContext, known: Set[int]) -> list[Split]:
        """The splits the input has now that are neither among :meth:`splits` nor in
        ``known``, with indexes every process derives alike. Called away from the
        task's thread; may raise when the input cannot be asked (tried again later)."""
        return []

    def start_position(self, split: Split) -> Any:
        """The position a checkpoint keeps for a split not read yet. ``None`` (from
        the split's start) unless the source's splits may be renumbered between runs,
        whose positions must say what they are a position of."""
        return None

    def restore_splits(self, splits: Sequence[Split], positions: Mapping[int, Any], *,
                       context: SourceContext) -> list[RestoredSplit]:
        """Every split to read after a restore, each with the position it continues
        from: ``splits`` (what :meth:`splits` lists now) and ``positions`` (the
        checkpoint's, by split index, every subtask's).

        Here, by index: a source whose splits never change. A position under an
        index the source no longer lists is dropped, with a warning. A source whose
        splits are found while it runs, or renumbered by a new plan, matches them by
        what they are instead, and rebuilds those only the checkpoint knows.
        """
        listed = {split.index for split in splits}
        dropped = sorted(index for index in positions if index not in listed)
        if dropped:
            log.warning("source %r: the checkpoint holds positions of splits %s, which it no "
                        "longer has: they are not read", self.name, dropped[:10])
        return [RestoredSplit(split=split, position=positions.get(split.index))
                for split in splits]

    def prepare_on_driver(self, *, spark_context: Any, staging: DriverStaging) -> None:  # noqa: B027
        """Runs once in the driver before the job starts (e.g. to stage a DataFrame).

        ``staging`` is the job's staging area; what a source stages there is read only
        once published through it (:meth:`DriverStaging.use`), which is how the
        subtasks learn where it is.

        The driver runs a plain ``SparkContext``: a ``SparkSession`` costs about as
        much startup again, which every restart would pay, so only a source that
        needs one creates it.
        """
