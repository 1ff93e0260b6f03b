"""A bounded set of checkpoint ids, for bookkeeping that must not grow with the job's age.

A task remembers which checkpoints it emitted barriers for (to forward a cancel
marker when one is aborted). Only checkpoints still in flight matter: a
completion settles every id up to it, an abort settles its own. The bound
catches ids whose completion or abort never arrives, such as those of a
coordinator that gave up on them without telling this subtask.
"""

from __future__ import annotations

import collections

DEFAULT_LIMIT = 64


class RecentIds:
    """The newest ids still in flight; oldest forgotten first beyond ``limit``."""

    def __init__(self, *, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self._limit = limit
        self._ids: collections.OrderedDict[int, None] = collections.OrderedDict()

    def add(self, checkpoint_id: int) -> None:
        self._ids[checkpoint_id] = None
        self._ids.move_to_end(checkpoint_id)
        while len(self._ids) > self._limit:
            self._ids.popitem(last=False)

    def discard(self, checkpoint_id: int) -> None:
        self._ids.pop(checkpoint_id, None)

    def discard_through(self, checkpoint_id: int) -> None:
        """Forget every id up to and including ``checkpoint_id`` (it completed)."""
        for known in [i for i in self._ids if i <= checkpoint_id]:
            del self._ids[known]

    def __contains__(self, checkpoint_id: object) -> bool:
        return checkpoint_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)
