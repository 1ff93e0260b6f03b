"""Looks for splits a source gained while the job runs, beside the source task.

Asking the input (a Kafka cluster's metadata) can take as long as the input's
timeout when it is unwell; done on the task's thread it would hold checkpoint
barriers back that long. So a daemon thread asks every ``interval`` seconds and
hands what it found to the task through a queue, which the task drains between
batches. A failed look is logged and tried again at the next interval: a source
that cannot be asked keeps reading the splits it has.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable

from job_runtime.sources.source_contract import Source, SourceContext, Split

log = logging.getLogger(__name__)


class SplitDiscovery(threading.Thread):
    """Finds new splits of ``source`` every ``interval`` seconds until :meth:`stop`."""

    def __init__(self, *, source: Source, context: SourceContext, interval: float,
                 known: Iterable[int]) -> None:
        super().__init__(name=f"split-discovery-{context.subtask}", daemon=True)
        self._source = source
        self._context = context
        self._interval = interval
        self._known = set(known)
        self._found: queue.SimpleQueue[Split] = queue.SimpleQueue()
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                splits = self._source.discover(context=self._context,
                                               known=frozenset(self._known))
            except Exception as exc:  # the input is unwell: keep what is read
                log.warning("looking for new splits of source %r failed (tried again in "
                            "%gs): %s", self._source.name, self._interval, exc)
                continue
            for split in splits:
                if split.index not in self._known:
                    self._known.add(split.index)
                    self._found.put(split)

    def found(self) -> list[Split]:
        """The splits found since the last call (every subtask's, not only ours)."""
        splits: list[Split] = []
        while True:
            try:
                splits.append(self._found.get_nowait())
            except queue.Empty:
                return splits

    def stop(self) -> None:
        self._stopped.set()
