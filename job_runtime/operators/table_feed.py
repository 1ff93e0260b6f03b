"""The thread that reads an enrichment table's source beside a keyed task.

The task thread must never wait on the table's source (a Kafka poll holds a batch
for its timeout, a file read for its size) between the records it enriches, so the
source is read here and the task takes what was read, in order, between batches
(:meth:`TableFeed.take`). What is read is handed over as updates: a bounded source's
reading whole (:class:`Replace`), or an unbounded one's batch with the position after
it (:class:`Upsert`), so the table and the positions a checkpoint keeps always agree.

Every subtask reads the whole table: its context is that of the only subtask of a
parallelism of one, so the source hands it every split.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from job_runtime.pipeline.table import Table
from job_runtime.records import Batch
from job_runtime.sources.source_contract import RestoredSplit, SourceContext, SplitReader

log = logging.getLogger(__name__)

QUEUE_BATCHES = 64
"""Batches read ahead of the task before the reader waits: a table that grows faster
than the task takes it holds at most this much memory twice."""
WAIT_SLICE_SECONDS = 0.25
"""How often a wait for the first reading looks whether the task was cancelled."""
UNKNOWN_BACKLOG_QUIET = 5.0
"""Seconds without a record after which a reader that cannot tell its backlog counts
as read to its end for the first reading."""
PROGRESS_SECONDS = 10.0
"""How often a long first reading says how far it got."""


@dataclasses.dataclass(frozen=True)
class Replace:
    """A bounded source read whole: the table is now these batches' rows."""

    batches: list[Batch]


@dataclasses.dataclass(frozen=True)
class Upsert:
    """One batch of an unbounded source's split, and the split's position after it."""

    split: int
    batch: Batch
    position: Any


TableUpdate = Replace | Upsert


class TableFeed:
    """Reads ``table``'s source in a thread of its own.

    ``positions`` (a restore's) continue an unbounded source where the checkpoint's
    table ended; a bounded source is read at once when ``read_now`` (a first start)
    and then every ``refresh``, or, restored, first after one ``refresh`` (without
    one, never again: the checkpoint holds its table).
    """

    def __init__(self, *, table: Table, context: SourceContext,
                 positions: Mapping[int, Any] | None, read_now: bool,
                 sleep: Callable[[float], bool] | None = None) -> None:
        self.table = table
        self.context = context
        self.positions = dict(positions or {})
        self.read_now = read_now
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._updates: queue.Queue[TableUpdate] = queue.Queue(maxsize=QUEUE_BATCHES)
        self.loaded = threading.Event()
        """Set once the first reading is complete: the whole of a bounded source, an
        unbounded one's backlog when it was opened (or at once, restored)."""
        self.error: BaseException | None = None
        self.rows_read = 0
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"table-feed-{table.name}")

    # -- the task's side

    def start(self) -> None:
        self._thread.start()

    def wait_loaded(self, *, cancelled: Callable[[], bool]) -> bool:
        """Wait for the first reading; ``False`` when the task was cancelled first.
        Raises what failed the reading."""
        started = last_said = time.monotonic()
        while not self.loaded.wait(WAIT_SLICE_SECONDS):
            if cancelled():
                return False
            if time.monotonic() - last_said >= PROGRESS_SECONDS:
                last_said = time.monotonic()
                log.info("table %r: %d rows read in %.0f s, still reading before the first "
                         "record is enriched", self.table.name, self.rows_read,
                         last_said - started)
        self._raise_error()
        return True

    def take(self) -> list[TableUpdate]:
        """What was read since the last call, in order; raises what failed the reading."""
        taken: list[TableUpdate] = []
        while True:
            try:
                taken.append(self._updates.get_nowait())
            except queue.Empty:
                break
        if not taken:
            self._raise_error()
        return taken

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    # -- the thread

    def _put(self, update: TableUpdate) -> bool:
        while not self._stop.is_set():
            try:
                self._updates.put(update, timeout=WAIT_SLICE_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            if self.table.source.unbounded:
                self._follow()
            else:
                self._read_on_schedule()
        except BaseException as exc:  # handed to the task, which fails with it
            self.error = exc
            self.loaded.set()

    def _read_on_schedule(self) -> None:
        refresh = self.table.refresh_ms
        if self.read_now:
            self._read_whole()
        self.loaded.set()
        while refresh is not None and not self._sleep(refresh / 1000):
            self._read_whole()

    def _read_whole(self) -> None:
        source = self.table.source
        batches: list[Batch] = []
        for split in source.splits(context=self.context):
            reader = source.open(split, None, context=self.context)
            try:
                while not self._stop.is_set():
                    batch = reader.read_batch()
                    if batch is None:
                        break
                    if len(batch):
                        batches.append(batch)
                        self.rows_read += len(batch)
            finally:
                reader.close()
        self._put(Replace(batches=batches))

    def _open_all(self) -> list[tuple[int, SplitReader]]:
        source = self.table.source
        listed = source.splits(context=self.context)
        if self.positions:
            restored = source.restore_splits(listed, self.positions, context=self.context)
        else:
            restored = [RestoredSplit(split=split, position=None) for split in listed]
        readers: list[tuple[int, SplitReader]] = []
        for found in restored:
            position = (source.start_position(found.split) if found.position is None
                        else found.position)
            readers.append((found.split.index,
                            source.open(found.split, position, context=self.context)))
        return readers

    def _follow(self) -> None:
        readers = self._open_all()
        if self.positions:
            self.loaded.set()  # restored: the checkpoint's table is the first reading
        quiet_since: float | None = None
        interval = self.table.source.discovery_interval
        looked = time.monotonic()
        try:
            while not self._stop.is_set():
                if interval and time.monotonic() - looked >= interval:
                    looked = time.monotonic()
                    readers.extend(self._discovered(known={i for i, _ in readers}))
                read = 0
                for index, reader in readers:
                    batch = reader.read_batch()
                    if batch is None or not len(batch):
                        continue
                    read += len(batch)
                    self.rows_read += len(batch)
                    if not self._put(Upsert(split=index, batch=batch,
                                            position=reader.position())):
                        return
                if not self.loaded.is_set():
                    quiet_since = None if read else (quiet_since or time.monotonic())
                    if self._caught_up(readers, quiet_since=quiet_since):
                        self.loaded.set()
                if not readers:
                    self._stop.wait(WAIT_SLICE_SECONDS)
        finally:
            for _, reader in readers:
                reader.close()

    def _discovered(self, *, known: set[int]) -> list[tuple[int, SplitReader]]:
        """Readers of the splits the source gained since they were opened (a topic's
        new partitions), each from its start: every row written there is the table's.
        Asked on this thread, which only delays the table's updates; a failed look is
        logged and made again at the next interval."""
        source = self.table.source
        try:
            found = source.discover(context=self.context, known=frozenset(known))
        except Exception as exc:  # the input is unwell: keep following what is open
            log.warning("table %r: looking for new splits failed (tried again later): %s",
                        self.table.name, exc)
            return []
        readers: list[tuple[int, SplitReader]] = []
        for split in found:
            if split.index in known:
                continue
            log.info("table %r: reading split %d, which its source gained", self.table.name,
                     split.index)
            readers.append((split.index,
                            source.open(split, source.start_position(split),
                                        context=self.context)))
        return readers

    @staticmethod
    def _caught_up(readers: list[tuple[int, SplitReader]], *,
                   quiet_since: float | None) -> bool:
        """Whether the first reading is over: every reader has read to its split's end
        as last seen; a reader that cannot tell its backlog (a Kafka reader before its
        first fetch answered), once nothing was read for :data:`UNKNOWN_BACKLOG_QUIET`."""
        quiet = quiet_since is not None and \
            time.monotonic() - quiet_since >= UNKNOWN_BACKLOG_QUIET
        for _, reader in readers:
            backlog = reader.backlog()
            if backlog is None:
                if not quiet:
                    return False
            elif backlog.records > 0:
                return False
        return True
