"""The running sum of ``examples/running_sum`` into PostgreSQL, exactly once.

A database cannot rename a staged file into place, so the job uses the write-ahead
sink: each checkpoint interval's rows wait next to the checkpoints and are sent when
the checkpoint completed. ``PostgresTotals`` is both the sending side and the
committer, and that is what makes it exactly once: the interval's rows and its row in
``cjob_committed`` (job, subtask, checkpoint) go into the database in one
transaction, so after any crash the committer's table says exactly which intervals
arrived, and a restore sends the others.

Arguments: ``dsn`` (a libpq connection string; default ``$POSTGRES_DSN``, which
``python -m e2e.postgres up`` prints), ``table`` (default ``running_totals``),
``count`` and ``rate`` as in the running-sum example.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pyarrow as pa

from job_runtime import Pipeline, sinks, sources

COMMITTED_TABLE = "cjob_committed"
IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class PostgresTotals(sinks.CheckpointCommitter):
    """Rows ``(key, value)`` into ``table``; intervals recorded in ``cjob_committed``."""

    def __init__(self, *, dsn: str, table: str) -> None:
        if not IDENTIFIER.match(table):
            raise ValueError(f"table must be a plain lower-case SQL name, got {table!r}")
        self.dsn = dsn
        self.table = table
        self.job_id = ""
        self._conn: Any = None

    def open(self, *, job_id: str) -> None:
        import psycopg

        self.job_id = job_id
        self._conn = psycopg.connect(self.dsn, autocommit=True)
        with self._conn.transaction():
            self._conn.execute(f"CREATE TABLE IF NOT EXISTS {self.table} "
                               "(key bigint NOT NULL, value bigint NOT NULL)")
            self._conn.execute(f"CREATE TABLE IF NOT EXISTS {COMMITTED_TABLE} "
                               "(job text, subtask int, checkpoint bigint, "
                               "PRIMARY KEY (job, subtask, checkpoint))")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def send(self, records: pa.Table, *, checkpoint_id: int, subtask: int) -> None:
        with self._conn.transaction(), self._conn.cursor() as cursor:
            with cursor.copy(f"COPY {self.table} (key, value) FROM STDIN") as copy:
                for key, value in zip(records.column("key").to_pylist(),
                                      records.column("value").to_pylist(), strict=True):
                    copy.write_row((key, value))
            self._mark(cursor, subtask=subtask, checkpoint_id=checkpoint_id)

    def is_committed(self, *, subtask: int, checkpoint_id: int) -> bool:
        row = self._conn.execute(
            f"SELECT 1 FROM {COMMITTED_TABLE} WHERE job = %s AND subtask = %s "
            "AND checkpoint = %s", (self.job_id, subtask, checkpoint_id)).fetchone()
        return row is not None

    def commit(self, *, subtask: int, checkpoint_id: int) -> None:
        # ``send`` already wrote the row in the interval's transaction; this only
        # confirms it (the sink calls it after every send).
        with self._conn.cursor() as cursor:
            self._mark(cursor, subtask=subtask, checkpoint_id=checkpoint_id)

    def _mark(self, cursor: Any, *, subtask: int, checkpoint_id: int) -> None:
        cursor.execute(f"INSERT INTO {COMMITTED_TABLE} (job, subtask, checkpoint) "
                       "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                       (self.job_id, subtask, checkpoint_id))


def build(p: Pipeline) -> None:
    dsn = p.args.get("dsn") or os.environ.get("POSTGRES_DSN")
    if not dsn:
        raise ValueError("set the job's dsn argument or POSTGRES_DSN "
                         "(python -m e2e.postgres up prints one)")
    count = int(p.args.get("count", 200_000))
    rate = p.args.get("rate")
    out = PostgresTotals(dsn=dsn, table=str(p.args.get("table", "running_totals")))
    (p.source(sources.sequence(count=count, rate=float(rate) if rate else None))
      .map(lambda r: {"key": r["seq"] % 97, "value": r["seq"]})
      .key_by("key")
      .reduce(lambda a, b: {"key": a["key"], "value": a["value"] + b["value"]})
      .sink(sinks.write_ahead(out.send, out)))
