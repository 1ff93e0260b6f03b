"""checkpointed-jobs runtime: Flink-style barrier snapshots for PySpark jobs.

A job is a function ``build(p: Pipeline) -> None``::

    from job_runtime import Pipeline, sources, sinks

    def build(p: Pipeline) -> None:
        (p.source(sources.sequence(count=200_000))
          .map(lambda r: {"key": r["seq"] % 97, "value": r["seq"]})
          .key_by("key")
          .reduce(lambda a, b: {"key": a["key"], "value": a["value"] + b["value"]})
          .sink(sinks.files(p.args["output"], format="jsonl")))

The checkpoint data that the operator and the CLI read as well (store,
storage, ``_metadata``, the driver's status file) is not here but in
:mod:`cjob_checkpoint`, so neither of them ever imports the engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from job_runtime import sinks, sources, watermarks, windows
    from job_runtime.pipeline import KeyedStream, Pipeline, Stream, WindowedStream
    from job_runtime.state.handles import MapState, ValueState

__all__ = ["KeyedStream", "MapState", "Pipeline", "Stream", "ValueState", "WindowedStream",
           "sinks", "sources", "watermarks", "windows"]

_WHERE = {"KeyedStream": "job_runtime.pipeline", "Pipeline": "job_runtime.pipeline",
          "Stream": "job_runtime.pipeline", "WindowedStream": "job_runtime.pipeline",
          "MapState": "job_runtime.state.handles", "ValueState": "job_runtime.state.handles"}
"""The API's names, imported when first asked for: ``python -m job_runtime run`` starts
Spark's JVM before it imports the engine (Arrow, pandas, the sinks), so that the
JVM's start and those imports overlap."""


def __getattr__(name: str) -> Any:
    if name in ("sinks", "sources", "watermarks", "windows"):
        return importlib.import_module(f"job_runtime.{name}")
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'job_runtime' has no attribute {name!r}")
