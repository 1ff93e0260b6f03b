"""What the table sinks (``delta``, ``iceberg``) share: their write modes, the checks of
their arguments that do not depend on the table format, and the one row per key a merge
takes from an interval."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from job_runtime.errors import PipelineDefinitionError

Mode = Literal["append", "merge"]
MODES: tuple[Mode, ...] = ("append", "merge")
ROW = "__cjob_row"


def require_package(*, sink: str, package: str, extra: str) -> None:
    """Refuse a table sink whose client library is not installed, naming the extra."""
    if importlib.util.find_spec(package) is None:
        raise PipelineDefinitionError(problem=f"sinks.{sink} needs the {package} package: "
                                              f"pip install 'checkpointed-jobs[{extra}]'")


def merge_keys(*, sink: str, mode: str, key: str | Sequence[str] | None) -> tuple[str, ...]:
    """The key columns of a table sink, checked against its mode: ``merge`` needs some."""
    if mode not in MODES:
        raise PipelineDefinitionError(problem=f"sinks.{sink} mode must be one of "
                                              f"{', '.join(MODES)}, got {mode!r}")
    keys = (key,) if isinstance(key, str) else tuple(key or ())
    if mode == "merge" and not keys:
        raise PipelineDefinitionError(problem=f"sinks.{sink} mode='merge' needs key=: the "
                                              "column(s) rows are matched by")
    return keys


def last_row_per_key(records: pa.Table, key: Sequence[str]) -> pa.Table:
    """The last row of each key, in the order they came (a merge takes one per key)."""
    numbered = records.append_column(ROW, pa.array(range(records.num_rows), type=pa.int64()))
    last = numbered.group_by(list(key), use_threads=False).aggregate([(ROW, "max")])
    rows = pc.sort_indices(last.column(f"{ROW}_max"))
    return records.take(pc.take(last.column(f"{ROW}_max"), rows))
