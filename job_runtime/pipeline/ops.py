"""The plan that ``build`` describes, as plain data: the operators (stateless
functions, ``key_by``, keyed operators) and their kinds, each source's input, and
the side outputs' branches. The execution reads these; the streams of
:mod:`job_runtime.pipeline.streams` make them.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

from job_runtime.pipeline.table import Table
from job_runtime.records import KeySelector
from job_runtime.sinks.sink_contract import Sink
from job_runtime.sources.source_contract import Source
from job_runtime.watermarks import WatermarkStrategy
from job_runtime.windows import SessionWindows, WindowAssigner


class RecordKind(enum.StrEnum):
    """The stateless functions."""

    MAP = "map"
    FLAT_MAP = "flat_map"
    FILTER = "filter"
    MAP_BATCHES = "map_batches"


class KeyedKind(enum.StrEnum):
    """The keyed operators, one operator class each (see ``build_keyed_operator``)."""

    REDUCE = "reduce"
    PROCESS = "process"
    AGGREGATE = "aggregate"
    WINDOW_AGGREGATE = "window_aggregate"
    SESSION_AGGREGATE = "session_aggregate"
    WINDOW_REDUCE = "window_reduce"
    WINDOW_PROCESS = "window_process"
    SESSION_REDUCE = "session_reduce"
    SESSION_PROCESS = "session_process"
    ENRICH = "enrich"
    INTERVAL_JOIN = "interval_join"
    WINDOW_JOIN = "window_join"


WINDOW_KINDS = frozenset({KeyedKind.WINDOW_AGGREGATE, KeyedKind.SESSION_AGGREGATE,
                          KeyedKind.WINDOW_REDUCE, KeyedKind.WINDOW_PROCESS,
                          KeyedKind.SESSION_REDUCE, KeyedKind.SESSION_PROCESS})
"""The windowed operators: they route records too late for any window aside."""


@dataclasses.dataclass(frozen=True)
class RecordOp:
    """A stateless function: ``map``, ``flat_map``, ``filter`` or ``map_batches``."""

    kind: RecordKind
    fn: Callable[..., Any]
    uid: str


@dataclasses.dataclass(frozen=True)
class KeyBy:
    key: str | tuple[str, ...] | KeySelector
    """A column, several columns (a composite key), or a function of the record."""
    uid: str

    @property
    def columns(self) -> tuple[str, ...] | None:
        """The key's columns; ``None`` for a function."""
        if isinstance(self.key, str):
            return (self.key,)
        if isinstance(self.key, tuple):
            return self.key
        return None


@dataclasses.dataclass(frozen=True)
class KeyedOp:
    """A keyed, stateful operator: ``reduce``, ``aggregate``, ``process``,
    ``window_aggregate``, ``session_aggregate``, ``window_reduce``,
    ``window_process``, ``enrich``, ``interval_join`` or ``window_join``."""

    kind: KeyedKind
    uid: str
    key: KeyBy
    fn: Callable[..., Any] | None = None
    aggregates: tuple[tuple[str, str, str | None], ...] = ()
    window: WindowAssigner | SessionWindows | None = None
    allowed_lateness: int = 0
    """Milliseconds a fired window is kept for late records (each updates its row)."""
    event_time: str | None = None
    """The event-time column (the source's watermark strategy names it)."""
    on_timer: Callable[..., Any] | None = None
    """``process`` only: called as ``on_timer(timestamp, ctx)`` when a timer is due."""
    table: Table | None = None
    """``enrich`` only: the table every subtask keeps."""
    lookup: str | None = None
    """``enrich`` only: the record's column holding the table's key."""
    bounds: tuple[int, int] | None = None
    """``interval_join`` only: ``lower`` and ``upper`` in ms."""

    @property
    def vectorised(self) -> bool:
        """Aggregates computed with numpy over named columns, no Python function per
        record: the stage before it combines, and reads large batches. Not
        ``session_aggregate``: a record's session depends on the key's other records,
        so it takes the records themselves."""
        return self.kind in (KeyedKind.AGGREGATE, KeyedKind.WINDOW_AGGREGATE)

    @property
    def per_record(self) -> bool:
        """Whether a Python function sees each record (the source then reads batches
        of :data:`~job_runtime.sources.source_contract.RECORD_BATCH_SIZE`)."""
        if self.kind in (KeyedKind.ENRICH, KeyedKind.INTERVAL_JOIN, KeyedKind.WINDOW_JOIN):
            # The default functions are run as Arrow columns (they say so).
            return not getattr(self.fn, "columnar", False)
        return not self.vectorised


Op = RecordOp | KeyBy | KeyedOp


@dataclasses.dataclass(kw_only=True)
class SourceInput:
    """One source of the pipeline: its records' event time and, once it is unioned with
    others, the record functions that apply to its records only."""

    source: Source
    watermarks: WatermarkStrategy | None
    ops: list[RecordOp] = dataclasses.field(default_factory=list)
    unioned: bool = False
    tail: object | None = None
    """The input's stream that may be continued (each is continued once)."""


@dataclasses.dataclass(kw_only=True)
class Branch:
    """A side output of a keyed operator, its record functions and its sink. It runs in
    the operator's task (no exchange), so its sink pre-commits at the same barriers."""

    origin: KeyedOp
    tag: str
    ops: list[RecordOp] = dataclasses.field(default_factory=list)
    sink: Sink | None = None
    sink_name: str = ""
