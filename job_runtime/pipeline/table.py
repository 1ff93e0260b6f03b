"""A table that enriches a stream: what ``p.table(...)`` describes and what
``stream.enrich(table, on=...)`` does with each record.

Every subtask of the enriching operator keeps the whole table (a broadcast: a
record may need any row, whichever key group it belongs to), read from the table's
own source by a thread beside the task (:mod:`job_runtime.operators.table_feed`)
rather than sent over the exchange, and snapshotted with the operator, so a restore
enriches the replayed records from the table as it was at the checkpoint rather than
as it is now. A bounded source (files) is read whole at the start and, with
``refresh``, read whole again on that schedule, each reading replacing the table; an
unbounded one (a compacted Kafka topic) is followed record by record, each record
replacing its key's row and a tombstone removing it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable

from job_runtime.durations import duration_ms
from job_runtime.errors import PipelineDefinitionError
from job_runtime.records import Record
from job_runtime.sources.source_contract import Source

EnrichFunction = Callable[[Record, Record | None], Record | None]
"""``fn(record, row)``: the enriched record (``None`` drops it); ``row`` is ``None``
when the table has no row for the record's key."""


class How(enum.StrEnum):
    """What the default enrichment does with a record whose key has no row."""

    LEFT = "left"
    """Keep it, without the table's fields (a left outer join)."""
    INNER = "inner"
    """Drop it (an inner join)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Table:
    """A table read from ``source``, one row per value of ``key``."""

    source: Source
    key: str
    columns: tuple[str, ...] | None
    """The fields a row keeps (with the key); ``None``: every field but the source's
    metadata columns (Kafka's partition, offset...)."""
    refresh_ms: int | None
    """A bounded source is read again this often (``None``: once, at the first start)."""
    name: str

    def row_fields(self, names: list[str]) -> list[str]:
        """Which of a batch's columns a row keeps."""
        if self.columns is not None:
            wanted = {self.key, *self.columns}
            return [name for name in names if name in wanted]
        dropped = set(self.source.metadata_columns) - {self.key}
        return [name for name in names if name not in dropped]


class Enrichment:
    """The default ``fn``: the record's fields, then the row's it lacks; a record
    without a row is kept as it is (``how="left"``) or dropped (``"inner"``). It is
    what the operator runs as one Arrow hash join per batch instead of a call per
    record."""

    columnar = True
    """The operator runs it as a join of columns, not per record."""

    def __init__(self, *, how: How) -> None:
        self.how = how

    def __call__(self, record: Record, row: Record | None) -> Record | None:
        if row is None:
            return record if self.how == How.LEFT else None
        return {**row, **record}


def table(source: Source, *, key: str, columns: list[str] | None = None,
          refresh: str | float | None = None, name: str) -> Table:
    """The checked description behind ``p.table(...)``."""
    if not isinstance(source, Source):
        raise PipelineDefinitionError(
            problem=f"p.table() needs a source from job_runtime.sources, got "
                    f"{type(source).__name__}")
    if not isinstance(key, str) or not key:
        raise PipelineDefinitionError(problem="p.table(key=...) needs the name of the "
                                              "column that identifies a row")
    kept: tuple[str, ...] | None = None
    if columns is not None:
        if isinstance(columns, str) or not all(isinstance(c, str) and c for c in columns):
            raise PipelineDefinitionError(
                problem=f"p.table(columns=...) needs a list of column names, got {columns!r}")
        kept = tuple(c for c in columns if c != key)
    refresh_ms: int | None = None
    if refresh is not None:
        if source.unbounded:
            raise PipelineDefinitionError(
                problem=f"p.table(refresh=...) re-reads a bounded source; the {source.name} "
                        f"source is followed as it grows: leave out refresh")
        refresh_ms = duration_ms(refresh, what="p.table() refresh")
        if refresh_ms <= 0:
            raise PipelineDefinitionError(
                problem=f"p.table(refresh=...) must be positive, got {refresh!r}")
    return Table(source=source, key=key, columns=kept, refresh_ms=refresh_ms, name=name)


def check_enrich(table_: object, *, on: object, fn: object, how: object) -> None:
    """The arguments of ``enrich`` a stream of any kind takes alike."""
    if not isinstance(table_, Table):
        raise PipelineDefinitionError(
            problem=f"enrich() needs a table from p.table(...), got {type(table_).__name__}")
    if not isinstance(on, str) or not on:
        raise PipelineDefinitionError(
            problem="enrich(on=...) needs the record's column that holds the table's key")
    if fn is not None and not callable(fn):
        raise PipelineDefinitionError(problem="enrich(fn=...) needs a function of "
                                              "(record, row)")
    if how not in {member.value for member in How}:
        raise PipelineDefinitionError(
            problem=f"enrich(how=...) must be one of {', '.join(How)}, got {how!r}")
    if fn is not None and how != How.LEFT:
        raise PipelineDefinitionError(
            problem="enrich(how=...) is for the default enrichment: a function given as "
                    "fn= returns None to drop a record")


def enrich_function(fn: EnrichFunction | None, *, how: str) -> EnrichFunction:
    """What the operator calls: the user's ``fn``, or the default for ``how``."""
    return fn if fn is not None else Enrichment(how=How(how))
