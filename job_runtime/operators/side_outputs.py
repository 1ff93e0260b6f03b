"""Records a keyed operator routes aside, per tag, until its task takes them.

A ``process`` function calls ``ctx.output(tag, record)``; the window operators put
records too late for every window they belong to under
:data:`job_runtime.windows.LATE_DATA`. The task takes what was collected after each
call into the operator (a batch, a watermark, a timer), on the same thread, so side
records leave in the same checkpoint interval as the main output they were made with:
the branch's sink pre-commits them at the same barrier. A tag no branch of the pipeline
reads is dropped by the task (late records are counted either way).
"""

from __future__ import annotations

from job_runtime.records import Batch, Record


class SideOutputs:
    """Side records per tag, in the order they were output."""

    def __init__(self) -> None:
        self._parts: dict[str, list[Batch]] = {}
        self._rows: dict[str, list[Record]] = {}

    def add(self, tag: str, record: Record) -> None:
        self._rows.setdefault(tag, []).append(record)

    def add_batch(self, tag: str, batch: Batch) -> None:
        if not len(batch):
            return
        self._move_rows(tag)
        self._parts.setdefault(tag, []).append(batch)

    def take(self) -> dict[str, list[Batch]]:
        """Everything collected since the last call, per tag, oldest first."""
        for tag in list(self._rows):
            self._move_rows(tag)
        taken, self._parts = self._parts, {}
        return taken

    def __bool__(self) -> bool:
        return bool(self._parts) or bool(self._rows)

    def _move_rows(self, tag: str) -> None:
        rows = self._rows.pop(tag, None)
        if rows:
            self._parts.setdefault(tag, []).append(Batch(rows=rows))

