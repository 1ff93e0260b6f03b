"""One background thread that runs the coordinator's slow work in submission order.

Committing a checkpoint (writing ``_metadata``, the store's compare-and-swap,
answering a manual request) and deleting an aborted checkpoint's data talk to
storage and the apiserver. Run under the coordinator's lock, one hung call
would stop every acknowledgement, decline and timeout; run on the subtasks'
connection threads, it would stall that subtask's messages. One serial thread
keeps commits in checkpoint order, which the store's subsumption relies on.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

Work = Callable[[], None]


class SerialWorker:
    """Runs submitted calls one at a time; a call that raises goes to ``on_error``."""

    def __init__(self, *, name: str, on_error: Callable[[BaseException], None]) -> None:
        self._queue: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self._on_error = on_error
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    def submit(self, work: Work) -> None:
        """Queue ``work``; never blocks (the queue holds at most a few calls per checkpoint)."""
        self._queue.put(work)

    def stop(self) -> None:
        """Let the calls queued so far run, then end the thread (without waiting for it)."""
        self._queue.put(None)

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            try:
                work()
            except Exception as exc:  # never let the worker die silently
                log.exception("checkpoint coordinator work failed")
                self._on_error(exc)
