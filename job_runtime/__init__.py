"""checkpointed-jobs runtime: Flink-style barrier snapshots for PySpark jobs.

A job is a function ``build(p: Pipeline) -> None``::

    from job_runtime import Pipeline, sources, sinks

    def build(p: Pipeline) -> None:
        (p.source(sources.sequence(count=200_000))
          .map(lambda r: {"key": r["seq"] % 97, "value": r["seq"]})
          .key_by("key")
          .reduce(lambda a, b: {"key": a["key"], "value": a["value"] + b["value"]})
          .sink(sinks.files(p.args["output"], format="jsonl")))

The names are loaded lazily, so that the checkpoint store and storage
(``job_runtime.store``, ``job_runtime.storage``), which the operator shares,
can be imported without Arrow or Spark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from job_runtime import sinks, sources
    from job_runtime.pipeline import KeyedStream, Pipeline, Stream
    from job_runtime.state.handles import MapState, ValueState

_LAZY = {
    "Pipeline": ("job_runtime.pipeline", "Pipeline"),
    "Stream": ("job_runtime.pipeline", "Stream"),
    "KeyedStream": ("job_runtime.pipeline", "KeyedStream"),
    "ValueState": ("job_runtime.state.handles", "ValueState"),
    "MapState": ("job_runtime.state.handles", "MapState"),
    "sources": ("job_runtime.sources", None),
    "sinks": ("job_runtime.sinks", None),
}

__all__ = ["KeyedStream", "MapState", "Pipeline", "Stream", "ValueState", "sinks", "sources"]


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'job_runtime' has no attribute {name!r}")
    module = importlib.import_module(target[0])
    return module if target[1] is None else getattr(module, target[1])
