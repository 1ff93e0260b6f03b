"""``sinks.iceberg``: exactly-once output into an Apache Iceberg table (``pyiceberg``).

As the Delta sink does (:mod:`job_runtime.sinks.delta`), each checkpoint interval of
each subtask becomes one table commit, sent by the write-ahead sink once its checkpoint
completed. Iceberg has no application transactions, so the commit's snapshot carries
the interval in its summary instead, the way Flink's Iceberg sink records its last
committed checkpoint: property ``cjob.<job>.<subtask>`` = the checkpoint's id. An
interval arrived when a snapshot of the table records its subtask at its checkpoint or
later (a subtask sends in checkpoint order, a restore sends the pending intervals again
before any new output); the snapshot and its summary are one atomic catalog commit.

The table lives in a catalog: ``catalog`` takes pyiceberg's catalog properties (a REST
catalog's ``uri``, ``warehouse``, credentials), and without them the sink uses an
embedded SQL catalog on SQLite at ``<warehouse>/catalog.db``, for a job whose subtasks
share a file system (``cjob run``, local Spark). A missing namespace and table are
created from the first interval's schema. ``mode="merge"`` upserts by ``key``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from job_runtime.errors import PipelineDefinitionError
from job_runtime.sinks.arrival import TransactionalSender
from job_runtime.sinks.failures import RejectedRecordError
from job_runtime.sinks.table_rows import Mode, last_row_per_key, merge_keys, require_package
from job_runtime.sinks.write_ahead import TransactionalSink

PROPERTY_PREFIX = "cjob"
CATALOG_FILE = "catalog.db"
SQLITE = "sqlite:///"


def snapshot_property(job_id: str, subtask: int) -> str:
    """The snapshot summary property that records one subtask's intervals of one job."""
    return f"{PROPERTY_PREFIX}.{job_id}.{subtask}"


class IcebergSender(TransactionalSender):
    """Commits intervals to an Iceberg table, each snapshot naming its subtask's checkpoint."""

    def __init__(self, *, table: str, catalog: Mapping[str, str], catalog_name: str,
                 mode: Mode, key: tuple[str, ...]) -> None:
        self.table_name = table
        self.catalog_properties = dict(catalog)
        self.catalog_name = catalog_name
        self.mode = mode
        self.key = key
        self.job_id = ""

    def open(self, *, job_id: str) -> None:
        self.job_id = job_id

    def _catalog(self) -> Any:
        from pyiceberg.catalog import load_catalog

        database = self.catalog_properties.get("uri", "")
        if database.startswith(SQLITE):
            # The embedded catalog's directory: SQLite creates the file, not its folder.
            Path(database.removeprefix(SQLITE)).parent.mkdir(parents=True, exist_ok=True)
        return load_catalog(self.catalog_name, **self.catalog_properties)

    def _table(self, catalog: Any) -> Any:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return catalog.load_table(self.table_name)
        except NoSuchTableError:
            return None

    def is_committed(self, *, subtask: int, checkpoint_id: int) -> bool:
        table = self._table(self._catalog())
        if table is None:
            return False
        name = snapshot_property(self.job_id, subtask)
        recorded = [int(value) for snapshot in table.snapshots()
                    if snapshot.summary is not None
                    and (value := snapshot.summary.get(name)) is not None
                    and str(value).isdigit()]
        return bool(recorded) and max(recorded) >= checkpoint_id

    def send(self, records: pa.Table, *, checkpoint_id: int, subtask: int) -> int | None:
        if records.num_rows == 0:
            return None  # nothing to commit; a later interval's snapshot covers it
        catalog = self._catalog()
        table = self._table(catalog) or self._create(catalog, records.schema)
        properties = {snapshot_property(self.job_id, subtask): str(checkpoint_id)}
        try:
            if self.mode == "merge":
                table.upsert(last_row_per_key(records, self.key), join_cols=list(self.key),
                             snapshot_properties=properties)
            else:
                table.append(records, snapshot_properties=properties)
        except ValueError as exc:  # pyiceberg's word for a schema that does not fit
            raise RejectedRecordError(position=0, problem=f"the schema of Iceberg table "
                                      f"{self.table_name} refuses the interval: "
                                      f"{str(exc).splitlines()[0]}") from None
        return None

    def _create(self, catalog: Any, schema: pa.Schema) -> Any:
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError

        namespace = self.table_name.rpartition(".")[0]
        if namespace:
            try:
                catalog.create_namespace(namespace)
            except NamespaceAlreadyExistsError:
                pass
        try:
            return catalog.create_table(self.table_name, schema=schema)
        except TableAlreadyExistsError:  # another subtask created it meanwhile
            return catalog.load_table(self.table_name)


class IcebergSink(TransactionalSink):
    name = "iceberg"


def embedded_catalog(warehouse: str) -> dict[str, str]:
    """An SQL catalog on SQLite in ``warehouse`` (a local directory), its tables there."""
    root = Path(warehouse.removeprefix("file://")).resolve()
    return {"type": "sql", "uri": f"{SQLITE}{root / CATALOG_FILE}",
            "warehouse": root.as_uri()}


def iceberg(table: str, *, catalog: Mapping[str, str] | None = None,
            warehouse: str | None = None, catalog_name: str = "default",
            mode: Mode = "append", key: str | Sequence[str] | None = None) -> IcebergSink:
    """Write each checkpoint's records into Iceberg table ``table`` (``namespace.name``)
    exactly once: appended, or (``mode="merge"``) upserted by the ``key`` column(s).
    ``catalog``: pyiceberg catalog properties; else ``warehouse``, a local directory for
    an embedded SQLite catalog."""
    require_package(sink="iceberg", package="pyiceberg", extra="iceberg")
    if not isinstance(table, str) or "." not in table.strip("."):
        raise PipelineDefinitionError(problem=f"sinks.iceberg needs a table as "
                                              f"namespace.name, got {table!r}")
    if (catalog is None) == (warehouse is None):
        raise PipelineDefinitionError(problem="sinks.iceberg needs either catalog= (the "
                                              "catalog's properties) or warehouse= (a "
                                              "directory for an embedded catalog)")
    keys = merge_keys(sink="iceberg", mode=mode, key=key)
    properties = dict(catalog) if catalog is not None else embedded_catalog(str(warehouse))
    return IcebergSink(sender=IcebergSender(table=table, catalog=properties,
                                            catalog_name=catalog_name, mode=mode, key=keys))
