"""``print``: records to the driver's standard output of each subtask (at least once)."""

from __future__ import annotations

import json
import sys
from typing import Any

from job_runtime.records import Batch
from job_runtime.sinks.sink_contract import Sink, SinkContext, SinkWriter


class _PrintWriter(SinkWriter):
    def __init__(self, *, prefix: str) -> None:
        self._prefix = prefix

    def write(self, batch: Batch) -> None:
        out = sys.stdout
        for row in batch.rows:
            out.write(f"{self._prefix}{json.dumps(row, default=str)}\n")
        out.flush()

    def snapshot(self, checkpoint_id: int) -> Any:
        return None

    def notify_complete(self, checkpoint_id: int, *, final: bool = False) -> None:
        return None

    def restore(self, states: list[Any]) -> None:
        return None


class PrintSink(Sink):
    name = "print"

    def __init__(self, *, prefix: str) -> None:
        self.prefix = prefix

    def open(self, *, context: SinkContext) -> SinkWriter:
        return _PrintWriter(prefix=self.prefix.format(subtask=context.subtask))


class DiscardSink(Sink):
    """Drops every record; for benchmarks (Spark's ``noop`` format)."""

    name = "discard"

    def open(self, *, context: SinkContext) -> SinkWriter:
        return _DiscardWriter()


class _DiscardWriter(SinkWriter):
    def write(self, batch: Batch) -> None:
        return None

    def snapshot(self, checkpoint_id: int) -> Any:
        return None

    def notify_complete(self, checkpoint_id: int, *, final: bool = False) -> None:
        return None

    def restore(self, states: list[Any]) -> None:
        return None


def print_(prefix: str = "{subtask}> ") -> PrintSink:
    return PrintSink(prefix=prefix)


def discard() -> DiscardSink:
    return DiscardSink()
