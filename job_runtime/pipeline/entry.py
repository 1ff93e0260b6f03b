""":class:`Pipeline`, what ``build`` receives: the job's arguments and the entry to
the dataflow, its sources.
"""

from __future__ import annotations

from job_runtime.errors import PipelineDefinitionError
from job_runtime.pipeline.definition import PipelineDefinition
from job_runtime.pipeline.ops import SourceInput
from job_runtime.pipeline.streams import Stream
from job_runtime.pipeline.table import Table, table
from job_runtime.sources.source_contract import Source
from job_runtime.watermarks import WatermarkStrategy


class Pipeline(PipelineDefinition):
    """What ``build`` receives: the job's arguments and the entry to the dataflow."""

    def source(self, source: Source, *, watermarks: WatermarkStrategy | None = None) -> Stream:
        """The job's input; ``watermarks`` (see :mod:`job_runtime.watermarks`) gives its
        records an event time, which windows need. Called again, another input, whose
        stream must be joined to the first with ``union``."""
        if not isinstance(source, Source):
            raise PipelineDefinitionError(
                problem=f"p.source() needs a source from job_runtime.sources, got "
                        f"{type(source).__name__}")
        if watermarks is not None and not isinstance(watermarks, WatermarkStrategy):
            raise PipelineDefinitionError(
                problem=f"p.source(watermarks=...) needs a strategy from job_runtime.watermarks "
                        f"(e.g. watermarks.bounded_out_of_orderness('ts', max_delay='5s')), got "
                        f"{type(watermarks).__name__}")
        entry = SourceInput(source=source, watermarks=watermarks)
        self.inputs.append(entry)
        if self.source_op is not None:
            entry.tail = Stream(self, input_=entry)
            return entry.tail
        self.source_op = source
        self.watermarks = watermarks
        stream = Stream(self)
        self.tail = stream
        return stream

    def table(self, source: Source, *, key: str, columns: list[str] | None = None,
              refresh: str | float | None = None, name: str | None = None) -> Table:
        """A table to enrich a stream with (``stream.enrich(table, on=...)``): the rows
        of ``source``, one per value of its ``key`` column (the last one read wins),
        kept whole by every subtask that enriches and restored with its checkpoints.
        A bounded source (``sources.files``) is read at the start and, with
        ``refresh`` (``"10m"``), read whole again that often; an unbounded one (a
        compacted ``sources.kafka`` topic, ``start="earliest"``) is followed as it
        grows, a record replacing its key's row and a tombstone (a record without a
        value) removing it. ``columns`` keeps only those fields of a row."""
        made = table(source, key=key, columns=columns, refresh=refresh,
                     name=name or f"table-{len(self.tables) + 1}")
        if any(t.name == made.name for t in self.tables):
            raise PipelineDefinitionError(
                problem=f"two tables are named {made.name!r}: give each its own name=")
        self.tables.append(made)
        return made
