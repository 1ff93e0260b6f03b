"""What a Structured Streaming baseline process reports to the benchmark, typed and versioned.

The baseline runs in its own process (its own JVM, so its start is measured like
ours); it prints one line ``RESULT <json>`` or ``TUNED <json>``. Both sides read
and write these lines through the classes here, so a change of fields is a
change of ``VERSION`` and a mismatch is a clear error instead of a missing key.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

VERSION = 1
RESULT_PREFIX = "RESULT "
TUNED_PREFIX = "TUNED "


class ResultFormatError(ValueError):
    """A baseline process printed a result this benchmark cannot read."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchTiming:
    """One micro-batch from the query's progress."""

    rows: int
    duration_ms: float
    ended_at: float
    """Wall-clock (epoch seconds) end of the batch: its trigger timestamp plus its duration."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaselineRun:
    """One measured run: warm-up batches, then the batches that carry the run's records."""

    rows_per_batch: int
    warmup: tuple[BatchTiming, ...]
    measured: tuple[BatchTiming, ...]
    spark_ready_at: float
    state_rows: int | None
    version: int = VERSION

    @property
    def measured_records(self) -> int:
        return sum(b.rows for b in self.measured)

    @property
    def measured_seconds(self) -> float:
        return sum(b.duration_ms for b in self.measured) / 1000.0

    def reached_at(self, records: int) -> float:
        """When the batch holding the ``records``-th row ended (sink written, batch committed).

        Counted from the query's first batch, warm-up included: the end-to-end
        time to ``records`` records, as a user starting this query would see it.
        """
        seen = 0
        for batch in (*self.warmup, *self.measured):
            seen += batch.rows
            if seen >= records:
                return batch.ended_at
        return (self.measured or self.warmup)[-1].ended_at


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuningPoint:
    rows_per_batch: int
    batch_ms_median: float
    records_per_second: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tuning:
    """The batch sizes tried by the warm-up search and the one chosen."""

    points: tuple[TuningPoint, ...]
    chosen: int
    version: int = VERSION


def tuning_record(tuning: Tuning | None) -> dict[str, Any] | None:
    """A search's sizes and choice as a result file keeps them (``None``: no search)."""
    if tuning is None:
        return None
    return {"chosen_records_per_batch": tuning.chosen,
            "points": [dataclasses.asdict(p) for p in tuning.points]}


def dump(prefix: str, value: BaselineRun | Tuning) -> str:
    return prefix + json.dumps(dataclasses.asdict(value))


def _check_version(data: dict[str, Any]) -> None:
    if data.get("version") != VERSION:
        raise ResultFormatError(f"baseline result version {data.get('version')!r}, "
                                f"this benchmark reads version {VERSION}")


def _batches(items: list[dict[str, Any]]) -> tuple[BatchTiming, ...]:
    return tuple(BatchTiming(rows=int(b["rows"]), duration_ms=float(b["duration_ms"]),
                             ended_at=float(b["ended_at"])) for b in items)


def parse_run(line: str) -> BaselineRun:
    try:
        data = json.loads(line[len(RESULT_PREFIX):])
        _check_version(data)
        return BaselineRun(rows_per_batch=int(data["rows_per_batch"]),
                           warmup=_batches(data["warmup"]), measured=_batches(data["measured"]),
                           spark_ready_at=float(data["spark_ready_at"]),
                           state_rows=None if data["state_rows"] is None
                           else int(data["state_rows"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultFormatError(f"unreadable baseline result: {exc}") from exc


def parse_tuning(line: str) -> Tuning:
    try:
        data = json.loads(line[len(TUNED_PREFIX):])
        _check_version(data)
        points = tuple(TuningPoint(rows_per_batch=int(p["rows_per_batch"]),
                                   batch_ms_median=float(p["batch_ms_median"]),
                                   records_per_second=float(p["records_per_second"]))
                       for p in data["points"])
        return Tuning(points=points, chosen=int(data["chosen"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultFormatError(f"unreadable tuning result: {exc}") from exc
