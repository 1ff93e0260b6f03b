"""``dataframe``: a Spark DataFrame, staged once so that its partitions are deterministic.

A DataFrame's partitions may differ between two evaluations (shuffles, file
listing order), which would break exactly-once replay. So the driver evaluates
the DataFrame once per job, writes it as Parquet files under the job's staging
area (skipped when a previous attempt finished staging), and the subtasks read
those files as splits with a row offset as position.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cjob_checkpoint.storage.factory import get_filesystem
from job_runtime.sources.base import Source, SourceContext, Split, SplitReader
from job_runtime.sources.files import FilesSource


class DataFrameSource(Source):
    name = "dataframe"
    prepares_on_driver = True

    def __init__(self, *, build: Callable[[Any], Any], name: str,
                 batch_size: int | None) -> None:
        self.build = build
        self.source_name = name
        self.batch_size = batch_size

    def _staged(self, staging_uri: str) -> str:
        return staging_uri.rstrip("/") + f"/{self.source_name}"

    def prepare_on_driver(self, *, spark_context: Any, staging_uri: str) -> None:
        target = self._staged(staging_uri)
        fs = get_filesystem(target)
        if fs.exists(target + "/_SUCCESS"):
            return
        from pyspark.sql import SparkSession

        spark = SparkSession(spark_context)
        df = self.build(spark)
        spark_target = target if "://" in target and not target.startswith("file://") else (
            "file://" + target.removeprefix("file://"))
        if target.startswith("s3://"):
            spark_target = "s3a://" + target.removeprefix("s3://")
        df.write.mode("overwrite").parquet(spark_target)

    def _files(self, context: SourceContext) -> FilesSource:
        target = self._staged(context.staging_uri)
        return FilesSource(paths=[target + "/"], fmt="parquet", pattern="*.parquet",
                           batch_size=self.batch_size or context.batch_size)

    def splits(self, *, context: SourceContext) -> list[Split]:
        return self._files(context).splits(context=context)

    def open(self, split: Split, position: Any, *, context: SourceContext) -> SplitReader:
        return self._files(context).open(split, position, context=context)


def dataframe(build: Callable[[Any], Any], *, name: str = "dataframe",
              batch_size: int | None = None) -> DataFrameSource:
    """Read the DataFrame that ``build(spark)`` returns, staged once per job.

    ``batch_size`` rows per batch; by default the pipeline's choice (larger when no
    Python function sees single records).
    """
    return DataFrameSource(build=build, name=name, batch_size=batch_size)
