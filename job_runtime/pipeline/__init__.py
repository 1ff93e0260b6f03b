"""The user API: ``build(p: Pipeline)`` describes the dataflow.

A pipeline is a source (or the ``union`` of several, each with record functions of
its own first), a chain of operators and a sink, with branches: a keyed operator's
side outputs (``ctx.output(tag, record)`` in ``process``, the windows'
``late_data()``) each take record functions and a sink of their own. ``key_by`` starts a
keyed exchange: the records are redistributed by key group so that each key is
handled by exactly one subtask, and the keyed operator after it (``reduce``,
``aggregate`` or ``process``) keeps state per key. The description is rebuilt
in every process by calling the same ``build`` function, so user functions never
need to be pickled.

The package's parts: :mod:`~job_runtime.pipeline.ops` (the operators, inputs and
branches as plain data), :mod:`~job_runtime.pipeline.definition` (what ``build``
described, as the execution reads it, and its checks),
:mod:`~job_runtime.pipeline.streams` (the streams ``build`` continues),
:mod:`~job_runtime.pipeline.table` (the tables a stream is enriched from) and
:mod:`~job_runtime.pipeline.entry` (:class:`Pipeline`, the entry to the dataflow).
"""

from job_runtime.pipeline.definition import (
    AGGREGATES,
    SINK_NAME,
    PipelineDefinition,
    aggregate_specs,
    check_sink,
)
from job_runtime.pipeline.entry import Pipeline
from job_runtime.pipeline.ops import (
    WINDOW_KINDS,
    Branch,
    KeyBy,
    KeyedKind,
    KeyedOp,
    Op,
    RecordKind,
    RecordOp,
    SourceInput,
)
from job_runtime.pipeline.streams import (
    KeyedStream,
    RecordFunctions,
    SideStream,
    Stream,
    WindowedStream,
)
from job_runtime.pipeline.table import Enrichment, How, Table
from job_runtime.sinks.sink_contract import MAIN_SINK

__all__ = [
    "AGGREGATES", "MAIN_SINK", "SINK_NAME", "WINDOW_KINDS", "Branch", "Enrichment", "How",
    "KeyBy", "KeyedKind", "KeyedOp", "KeyedStream", "Op", "Pipeline", "PipelineDefinition",
    "RecordFunctions", "RecordKind", "RecordOp", "SideStream", "SourceInput", "Stream",
    "Table", "WindowedStream",
    "aggregate_specs", "check_sink",
]
