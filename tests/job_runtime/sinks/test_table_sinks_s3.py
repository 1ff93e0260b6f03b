"""The Delta and Iceberg sinks with their tables on S3 (a real S3 server, moto's):
each checkpoint's interval lands once it completes, and a restore after a crash past
the table's commit finds the commit in the table on S3 and sends nothing twice; read
back with ``deltalake`` and ``pyiceberg`` from S3."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyiceberg.catalog import load_catalog
from table_sinks import complete_intervals, open_table_writer

from e2e.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Bucket
from job_runtime.records import Batch
from job_runtime.sinks import delta, iceberg
from job_runtime.sinks.write_ahead import TransactionalSink

TABLE = "lake.clicks"


def delta_options(bucket: S3Bucket) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": bucket.endpoint_url, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}


def iceberg_catalog(bucket: S3Bucket, tmp_path: Path) -> dict[str, str]:
    """An SQL catalog of this machine, the tables' files on S3."""
    return {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
            "warehouse": f"{bucket.uri}/warehouse", "s3.endpoint": bucket.endpoint_url,
            "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY,
            "s3.region": REGION}


Format = tuple[Callable[[S3Bucket, Path], TransactionalSink],
               Callable[[S3Bucket, Path], list[dict[str, Any]]]]
FORMATS: dict[str, Format] = {
    "delta": (lambda b, _: delta(f"{b.uri}/clicks", storage_options=delta_options(b)),
              lambda b, _: DeltaTable(f"{b.uri}/clicks", storage_options=delta_options(b))
              .to_pyarrow_table().to_pylist()),
    "iceberg": (lambda b, tmp: iceberg(TABLE, catalog=iceberg_catalog(b, tmp)),
                lambda b, tmp: load_catalog("default", **iceberg_catalog(b, tmp))
                .load_table(TABLE).scan().to_arrow().to_pylist()),
}


def rows(*pairs: tuple[str, int]) -> Batch:
    return Batch(rows=[{"user": user, "clicks": clicks} for user, clicks in pairs])


@pytest.mark.parametrize("form", sorted(FORMATS))
def test_a_table_on_s3_gets_each_interval_once_through_a_restore(
        form: str, s3_bucket: S3Bucket, tmp_path: Path) -> None:
    make, read = FORMATS[form]
    staging = tmp_path / "staging"
    writer = open_table_writer(make(s3_bucket, tmp_path), staging=staging)
    complete_intervals(writer, [rows(("ann", 1), ("bob", 1)), rows(("ann", 2))])
    writer.write(rows(("cid", 7)))
    state = writer.snapshot(3)
    writer.notify_complete(3)     # in the table on S3; the attempt dies before its store heard
    again = open_table_writer(make(s3_bucket, tmp_path), staging=staging)
    again.restore([state])
    found = sorted((r["user"], r["clicks"]) for r in read(s3_bucket, tmp_path))
    assert found == [("ann", 1), ("ann", 2), ("bob", 1), ("cid", 7)]
    listed = s3_bucket.client.list_objects_v2(Bucket=s3_bucket.bucket)
    assert listed.get("KeyCount", 0) > 0, "the table's files are on S3"
