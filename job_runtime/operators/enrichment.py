"""``enrich``: each record with its row of a table every subtask keeps whole.

The table is this operator's state, but not keyed state: every subtask holds all of
it (a record may need any row), read by a :class:`~job_runtime.operators.table_feed.
TableFeed` beside the task. A snapshot holds the rows, which message key wrote each
(so a Kafka tombstone finds the row it removes) and the source's positions; the rows
are shared with the snapshot and copied by the first change after it, so a barrier
costs no copy. A restore at any parallelism takes the table of the first old subtask
whose key groups it inherits: every old subtask held a whole table with the positions
it was read to, each a consistent pair.

The default enrichment is one Arrow hash join of a batch with the table (cached as
Arrow until the table changes); a function of the user's runs per record.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from job_runtime.errors import UserCodeError
from job_runtime.operators.keyed_operator import KeyedOperator
from job_runtime.operators.table_feed import Replace, TableFeed, TableUpdate
from job_runtime.pipeline.table import Enrichment, How, Table
from job_runtime.records import Batch, Record, rows_to_arrow
from job_runtime.sources.source_contract import SourceContext

log = logging.getLogger(__name__)

TABLE_SNAPSHOT_VERSION = 1
MESSAGE_KEY = "key"
"""The metadata column of a log's message key (Kafka's), by which a tombstone, a
record without a value, names the row it removes."""


class _TableSnapshot:
    """The rows and positions at the barrier, by reference (the operator copies before
    its next change)."""

    def __init__(self, *, table: str, rows: dict[Any, Record], writers: dict[Any, Any],
                 positions: dict[int, Any]) -> None:
        self.table = table
        self.rows = rows
        self.writers = writers
        self.positions = positions

    def serialize(self) -> bytes:
        return pickle.dumps({"version": TABLE_SNAPSHOT_VERSION, "table": self.table,
                             "rows": self.rows, "writers": self.writers,
                             "positions": self.positions},
                            protocol=pickle.HIGHEST_PROTOCOL)


class EnrichOperator(KeyedOperator):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        assert self.op.table is not None and self.op.lookup is not None
        self.table: Table = self.op.table
        self.lookup: str = self.op.lookup
        self.rows: dict[Any, Record] = {}
        self.writers: dict[Any, Any] = {}
        """Message key -> the table key its latest record wrote (a log's tables only)."""
        self.positions: dict[int, Any] = {}
        self._shared = False
        """Whether a snapshot holds ``rows``, ``writers`` and ``positions``."""
        self._arrow: pa.Table | None = None
        self._feed: TableFeed | None = None
        self._cancelled: Callable[[], bool] = lambda: False
        self._restored = False
        self._loaded = False
        self._message_key = (MESSAGE_KEY in self.table.source.metadata_columns
                             and self.table.key != MESSAGE_KEY)

    # -- the table

    def open(self, *, sources: SourceContext, cancelled: Callable[[], bool]) -> None:
        self._cancelled = cancelled
        self._feed = TableFeed(table=self.table, context=sources,
                               positions=self.positions if self._restored else None,
                               read_now=not self._restored)
        self._feed.start()

    def close(self) -> None:
        if self._feed is not None:
            self._feed.close()

    def _ready(self) -> bool:
        """The table's updates applied; ``False`` when the task was cancelled before
        the first reading ended."""
        feed = self._feed
        if feed is None:
            raise RuntimeError("enrich: the operator was not opened")
        try:
            if not self._loaded:
                if not feed.wait_loaded(cancelled=self._cancelled):
                    return False
                self._loaded = True
                log.info("subtask %d: table %r ready, %d rows", self.subtask,
                         self.table.name, len(self.rows) if self._restored else feed.rows_read)
            self._apply(feed.take())
        except UserCodeError:
            raise
        except Exception as exc:
            raise self._fail(exc) from exc
        return True

    def _writable(self) -> None:
        if self._shared:
            self.rows = dict(self.rows)
            self.writers = dict(self.writers)
            self.positions = dict(self.positions)
            self._shared = False

    def _apply(self, updates: list[TableUpdate]) -> None:
        for update in updates:
            self._writable()
            self._arrow = None
            if isinstance(update, Replace):
                self.rows, self.writers = {}, {}
                for batch in update.batches:
                    self._upsert(batch)
            else:
                self._upsert(update.batch)
                self.positions[update.split] = update.position

    def _upsert(self, batch: Batch) -> None:
        arrow = batch.arrow
        names = arrow.schema.names
        key = self.table.key
        fields = self.table.row_fields(names)
        values = set(names) - set(self.table.source.metadata_columns)
        if key not in fields and not values and self._message_key:
            # Tombstones only: no record of the batch has a value, so none has a field.
            arrow = arrow.append_column(key, pa.nulls(arrow.num_rows))
            fields = [key]
        if key not in fields:
            raise UserCodeError(operator=self.op.uid, subtask=self.subtask, details=(
                f"the table {self.table.name!r} is keyed by {key!r}, which its source's "
                f"records lack; their columns: {', '.join(names)}"))
        rows = arrow.select(fields).to_pylist()
        senders: list[Any] = (arrow.column(MESSAGE_KEY).to_pylist()
                              if self._message_key and MESSAGE_KEY in names
                              else [None] * len(rows))
        table, writers = self.rows, self.writers
        for row, sender in zip(rows, senders, strict=True):
            value = row[key]
            if all(v is None for name, v in row.items() if name != key):
                # A tombstone: the row its key, or its message key, wrote is gone.
                gone = value if value is not None else writers.get(sender)
                if gone is not None:
                    table.pop(gone, None)
                if sender is not None:
                    writers.pop(sender, None)
                continue
            if value is None:
                continue  # a row without a key can never be found
            table[value] = row
            if sender is not None:
                writers[sender] = value

    def _table_arrow(self) -> pa.Table:
        if self._arrow is None:
            self._arrow = pa.Table.from_batches([rows_to_arrow(list(self.rows.values()))])
        return self._arrow

    # -- records

    def process(self, batch: Batch) -> Batch:
        if not self._ready():
            return Batch(rows=[])
        fn = self.op.fn
        if isinstance(fn, Enrichment):
            return self._vectorised(lambda b: self._join(b, how=fn.how), batch)
        assert fn is not None
        get = self.rows.get
        lookup = self.lookup
        out: list[Record] = []
        try:
            for record in batch.rows:
                enriched = fn(record, get(record[lookup]))
                if enriched is not None:
                    out.append(enriched)
        except Exception as exc:
            raise self._fail(exc) from exc
        return Batch(rows=out)

    def _join(self, batch: Batch, *, how: How) -> Batch:
        left = pa.Table.from_batches([batch.arrow])
        on, key = self.lookup, self.table.key
        if on not in left.column_names:
            raise UserCodeError(operator=self.op.uid, subtask=self.subtask, details=(
                f"enrich(on={on!r}): the records have no column {on!r}; their columns: "
                f"{', '.join(left.column_names)}"))
        right = self._table_arrow()
        if right.num_rows == 0 or key not in right.column_names:
            return batch if how is How.LEFT else Batch(rows=[])
        extra = [name for name in right.column_names
                 if name != key and name not in left.column_names]
        right = right.select([key, *extra])
        wanted = left.schema.field(on).type
        if right.schema.field(key).type != wanted:
            try:
                right = right.set_column(0, key, right.column(key).cast(wanted))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise UserCodeError(operator=self.op.uid, subtask=self.subtask, details=(
                    f"enrich(on={on!r}): the records' {on!r} are {wanted}, the table "
                    f"{self.table.name!r}'s {key!r} {right.schema.field(key).type}, which "
                    f"cannot be compared: {exc}")) from None
        joined = left.join(right, keys=on, right_keys=key,
                           join_type="left outer" if how is How.LEFT else "inner")
        if joined.num_rows == 0:
            return Batch(rows=[])
        return Batch(arrow=joined.combine_chunks().to_batches()[0])

    # -- state

    def snapshot(self) -> _TableSnapshot:
        self._shared = True
        return _TableSnapshot(table=self.table.name, rows=self.rows, writers=self.writers,
                              positions=self.positions)

    def restore(self, blobs: Iterable[bytes]) -> int:
        for blob in blobs:
            payload = pickle.loads(blob)
            if not isinstance(payload, dict) or "rows" not in payload:
                raise ValueError("enrich: a state file that holds no table")
            if payload.get("version") != TABLE_SNAPSHOT_VERSION:
                raise ValueError(f"table state of version {payload.get('version')!r}: this "
                                 f"runtime reads version {TABLE_SNAPSHOT_VERSION}")
            self.rows = payload["rows"]
            self.writers = payload["writers"]
            self.positions = payload["positions"]
            self._restored = True
            break  # every old subtask held the whole table: one is enough
        return len(self.rows)

    def key_count(self) -> int:
        return len(self.rows)
