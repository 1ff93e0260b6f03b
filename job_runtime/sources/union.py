"""Several sources read as one: what ``a.union(b)`` runs.

The source task reads splits; a union's splits are those of each input, renumbered
so that every process derives the same index for the same split: input ``i``'s
split ``s`` is ``i * UNION_INDEX_BASE + s``. Input 0 keeps its own numbers, so the
positions a checkpoint of a job with one source holds are still found when a second
source is unioned in. Readers, discovery and restores are the inputs' own; the
union only translates indexes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence, Set
from typing import Any

from job_runtime.sources.source_contract import (
    RestoredSplit,
    Source,
    SourceContext,
    Split,
    SplitReader,
)
from job_runtime.sources.staging import DriverStaging

log = logging.getLogger(__name__)

UNION_INDEX_BASE = 10**12
"""Far above any index one source gives (the Kafka source's discovered partitions
stay below a few million)."""


def union_index(place: int, index: int) -> int:
    return place * UNION_INDEX_BASE + index


def input_of(index: int) -> int:
    """Which input of a union a split index belongs to."""
    return index // UNION_INDEX_BASE


@dataclasses.dataclass(frozen=True)
class UnionPart:
    """A union's split: the input it belongs to and that input's own split."""

    place: int
    split: Split

    def __str__(self) -> str:
        return f"input {self.place}: {self.split.description}"


class UnionSource(Source):
    """The inputs of a union, in the order the pipeline created them."""

    def __init__(self, inputs: Sequence[Source]) -> None:
        self.inputs = list(inputs)
        self.name = "union(" + ", ".join(source.name for source in self.inputs) + ")"
        self.prepares_on_driver = any(source.prepares_on_driver for source in self.inputs)

    def _wrap(self, place: int, splits: Sequence[Split]) -> list[Split]:
        return [Split(index=union_index(place, split.index),
                      description=UnionPart(place=place, split=split)) for split in splits]

    def splits(self, *, context: SourceContext) -> list[Split]:
        found: list[Split] = []
        for place, source in enumerate(self.inputs):
            found.extend(self._wrap(place, source.splits(context=context)))
        return found

    def open(self, split: Split, position: Any, *, context: SourceContext) -> SplitReader:
        part = split.description
        assert isinstance(part, UnionPart)
        return self.inputs[part.place].open(part.split, position, context=context)

    @property
    def reads_splits_together(self) -> bool:
        """Together when every input reads its own so."""
        return all(source.reads_splits_together for source in self.inputs)

    def reads_together(self, split: int) -> bool:
        """As the split's input reads its own splits (the source task keeps a reader
        of each input open besides, so no input waits for another's end)."""
        return self.inputs[input_of(split)].reads_splits_together

    @property
    def unbounded(self) -> bool:
        """A union never ends while one of its inputs does not."""
        return any(source.unbounded for source in self.inputs)

    @property
    def discovery_interval(self) -> float | None:
        intervals = [source.discovery_interval for source in self.inputs
                     if source.discovery_interval]
        return min(intervals) if intervals else None

    def discover(self, *, context: SourceContext, known: Set[int]) -> list[Split]:
        found: list[Split] = []
        for place, source in enumerate(self.inputs):
            if not source.discovery_interval:
                continue
            own = {index - union_index(place, 0) for index in known if input_of(index) == place}
            found.extend(self._wrap(place, source.discover(context=context, known=own)))
        return found

    def start_position(self, split: Split) -> Any:
        part = split.description
        assert isinstance(part, UnionPart)
        return self.inputs[part.place].start_position(part.split)

    def restore_splits(self, splits: Sequence[Split], positions: Mapping[int, Any], *,
                       context: SourceContext) -> list[RestoredSplit]:
        """Each input restores its own splits from the positions of its place."""
        restored: list[RestoredSplit] = []
        for place, source in enumerate(self.inputs):
            base = union_index(place, 0)
            own_splits = [split.description.split for split in splits
                          if input_of(split.index) == place]
            own_positions = {index - base: position for index, position in positions.items()
                             if input_of(index) == place}
            for found in source.restore_splits(own_splits, own_positions, context=context):
                restored.append(RestoredSplit(split=self._wrap(place, [found.split])[0],
                                              position=found.position))
        beyond = sorted({input_of(index) for index in positions} - set(range(len(self.inputs))))
        if beyond:
            log.warning("source %r: the checkpoint holds positions of inputs %s, which the "
                        "union no longer has: they are not read", self.name, beyond)
        return restored

    def prepare_on_driver(self, *, spark_context: Any, staging: DriverStaging) -> None:
        for source in self.inputs:
            source.prepare_on_driver(spark_context=spark_context, staging=staging)
