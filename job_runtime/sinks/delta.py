"""``sinks.delta``: exactly-once output into a Delta Lake table (the ``deltalake`` package).

Each checkpoint interval of each subtask becomes one Delta commit, sent by the
write-ahead sink once its checkpoint completed (:mod:`job_runtime.sinks.write_ahead`),
and the commit carries an application transaction: app id ``cjob:<job>:<subtask>``,
version the checkpoint's id. Delta keeps the latest version of each app id in the
table's own log, written in the same atomic commit as the rows, so whether an interval
arrived is a question to the table: it did when the table's version for its subtask is
its checkpoint or later (a subtask sends its intervals in checkpoint order, and a
restore sends the pending ones again before any new output). A send repeated after a
crash between the table's commit and the checkpoint store's is recognised and skipped,
as Structured Streaming's ``foreachBatch`` does with ``txnAppId`` and ``txnVersion``.

``mode="append"`` appends the rows; ``mode="merge"`` upserts them by ``key`` (the
interval's last row of a key wins, a row whose key the table holds replaces it): a
table of the latest value per key. A row the table's schema refuses (a new column, a
type that does not cast) ends the job with that one sentence rather than retrying.
One ``delta`` sink per table per job: its app ids are the job's and the subtasks'.

``deltalake`` is an optional dependency (``pip install 'checkpointed-jobs[delta]'``),
imported only by a job that uses the sink. Local paths and ``s3://`` (the job's
``AWS_*`` settings; ``storage_options`` adds or overrides options) are both tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from job_runtime.errors import PipelineDefinitionError
from job_runtime.sinks.arrival import TransactionalSender
from job_runtime.sinks.failures import RejectedRecordError
from job_runtime.sinks.table_rows import Mode, last_row_per_key, merge_keys, require_package
from job_runtime.sinks.write_ahead import TransactionalSink

APP_PREFIX = "cjob"


def app_id(job_id: str, subtask: int) -> str:
    """The Delta application transaction of one subtask's intervals of one job."""
    return f"{APP_PREFIX}:{job_id}:{subtask}"


class DeltaSender(TransactionalSender):
    """Commits intervals to a Delta table, each with its subtask's transaction version."""

    def __init__(self, *, uri: str, mode: Mode, key: tuple[str, ...],
                 partition_by: tuple[str, ...], storage_options: Mapping[str, str]) -> None:
        self.uri = uri
        self.mode = mode
        self.key = key
        self.partition_by = partition_by
        self.storage_options = dict(storage_options)
        self.job_id = ""

    def open(self, *, job_id: str) -> None:
        self.job_id = job_id

    def _options(self) -> dict[str, str] | None:
        return self.storage_options or None

    def _table(self) -> Any:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.uri, storage_options=self._options())
        except TableNotFoundError:
            return None

    def is_committed(self, *, subtask: int, checkpoint_id: int) -> bool:
        table = self._table()
        if table is None:
            return False
        version = table.transaction_version(app_id(self.job_id, subtask))
        return version is not None and version >= checkpoint_id

    def send(self, records: pa.Table, *, checkpoint_id: int, subtask: int) -> int | None:
        if records.num_rows == 0:
            return None  # nothing to commit; a later interval's version covers it
        from deltalake import CommitProperties, Transaction, write_deltalake
        from deltalake.exceptions import SchemaMismatchError

        properties = CommitProperties(app_transactions=[
            Transaction(app_id=app_id(self.job_id, subtask), version=checkpoint_id)])
        table = self._table() if self.mode == "merge" else None
        if self.mode == "merge":
            records = last_row_per_key(records, self.key)
        try:
            if table is None:
                # The first interval of a merge creates the table: nothing to match yet.
                write_deltalake(self.uri, records, mode="append",
                                partition_by=list(self.partition_by) or None,
                                storage_options=self._options(),
                                commit_properties=properties)
            else:
                predicate = " AND ".join(f"t.`{k}` = s.`{k}`" for k in self.key)
                (table.merge(source=records, predicate=predicate,
                             source_alias="s", target_alias="t",
                             commit_properties=properties)
                 .when_matched_update_all().when_not_matched_insert_all().execute())
        except SchemaMismatchError as exc:
            raise RejectedRecordError(position=0, problem=f"the schema of Delta table "
                                      f"{self.uri} refuses the interval: {exc}") from None
        return None


class DeltaSink(TransactionalSink):
    name = "delta"


def delta(uri: str, *, mode: Mode = "append", key: str | Sequence[str] | None = None,
          partition_by: str | Sequence[str] | None = None,
          storage_options: Mapping[str, str] | None = None) -> DeltaSink:
    """Write each checkpoint's records into the Delta table at ``uri`` exactly once:
    appended, or (``mode="merge"``) upserted by the ``key`` column(s)."""
    require_package(sink="delta", package="deltalake", extra="delta")
    if not isinstance(uri, str) or not uri:
        raise PipelineDefinitionError(problem="sinks.delta needs the table's path or URI")
    keys = merge_keys(sink="delta", mode=mode, key=key)
    partitions = (partition_by,) if isinstance(partition_by, str) else tuple(partition_by or ())
    return DeltaSink(sender=DeltaSender(uri=uri, mode=mode, key=keys, partition_by=partitions,
                                        storage_options=storage_options or {}))
