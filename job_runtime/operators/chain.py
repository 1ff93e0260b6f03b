"""Stateless record functions chained together and run on one batch at a time."""

from __future__ import annotations

import traceback
from collections.abc import Sequence

import pyarrow as pa

from job_runtime.errors import UserCodeError
from job_runtime.pipeline import RecordKind, RecordOp
from job_runtime.records import Batch, Record


def _user_error(op: RecordOp, subtask: int, exc: BaseException) -> UserCodeError:
    details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return UserCodeError(operator=op.uid, subtask=subtask, details=details)


def _apply(op: RecordOp, batch: Batch) -> Batch:
    if op.kind == RecordKind.MAP_BATCHES:
        result = op.fn(batch.arrow)
        if isinstance(result, pa.Table | pa.RecordBatch):
            return Batch.of(result)
        raise TypeError(f"map_batches function must return a pyarrow RecordBatch or Table, "
                        f"got {type(result).__name__}")
    rows = batch.rows
    fn = op.fn
    out: list[Record]
    if op.kind == RecordKind.MAP:
        out = [fn(r) for r in rows]
    elif op.kind == RecordKind.FILTER:
        out = [r for r in rows if fn(r)]
    else:
        out = [o for r in rows for o in (fn(r) or ())]
    return Batch(rows=out)


class RecordChain:
    """Runs ``map``/``flat_map``/``filter``/``map_batches`` in order on each batch."""

    def __init__(self, *, ops: Sequence[RecordOp], subtask: int) -> None:
        self.ops = list(ops)
        self.subtask = subtask

    def __call__(self, batch: Batch) -> Batch:
        for op in self.ops:
            if not len(batch):
                return batch
            try:
                batch = _apply(op, batch)
            except UserCodeError:
                raise
            except Exception as exc:
                raise _user_error(op, self.subtask, exc) from exc
        return batch
