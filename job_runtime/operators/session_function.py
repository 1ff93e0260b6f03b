"""``window(windows.session(gap=...)).reduce(fn)`` and ``.process(fn)``: a Python
function per key and session.

Sessions are kept, merged, fired, dropped and restored exactly as the session
aggregate keeps them (:mod:`job_runtime.operators.session_window`); only what a
session holds differs. ``reduce`` holds the session's reduced record: two sessions
that merge (a record fell in the gap between them) are reduced together, in no
particular order, so ``fn`` must not depend on the order of its records (as with
Flink's merging windows). ``process`` holds the session's records with their event
times and calls ``fn(key, Window(start, end), records)`` with them in event-time
order when the session fires. The records stored are never changed in place: the
functions get copies.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from job_runtime.operators.session_window import Session, SessionWindowOperator
from job_runtime.operators.window_function import processed, reduced, time_bound
from job_runtime.records import Batch, Record
from job_runtime.windows import Window


class SessionReduceOperator(SessionWindowOperator):
    """``window(session).reduce(fn)``: one record per session, ``fn``-reduced."""

    def _contents(self, batch: Batch, stamps: list[int]) -> list[list[Any]]:
        return [[row] for row in batch.rows]

    def _merge(self, into: list[Any], other: Iterable[Any]) -> None:
        fn = self.op.fn
        assert fn is not None
        (stored,) = other
        into[0] = reduced(fn, stored, [into[0]])

    def _rows(self, fired: list[tuple[Any, Session]]) -> Batch:
        kind = self.time_kind
        return Batch(rows=[{**contents[0], "window_start": time_bound(start, time_kind=kind),
                            "window_end": time_bound(end, time_kind=kind)}
                           for _, (start, end, _, contents) in fired])


class SessionProcessOperator(SessionWindowOperator):
    """``window(session).process(fn)``: ``fn(key, window, records)`` per session."""

    def _contents(self, batch: Batch, stamps: list[int]) -> list[list[Any]]:
        return [[(stamp, row)] for stamp, row in zip(stamps, batch.rows, strict=True)]

    def _merged(self, new: list[Any], kept: list[Any]) -> list[Any]:
        """The shorter list appended to the longer: a record joining a long session
        costs one append, not a copy of the session's records."""
        if len(kept) < len(new):
            new, kept = kept, new
        kept.extend(new)
        return kept

    def _rows(self, fired: list[tuple[Any, Session]]) -> Batch:
        fn = self.op.fn
        assert fn is not None
        out: list[Record] = []
        for key, (start, end, _, contents) in fired:
            ordered = [record for _, record in sorted(contents, key=lambda pair: pair[0])]
            out.extend(processed(fn, key, Window(start, end), ordered))
        return Batch(rows=out)
