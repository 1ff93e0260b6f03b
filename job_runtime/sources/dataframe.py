"""``dataframe``: a Spark DataFrame, staged once so that its partitions are deterministic.

A DataFrame's partitions may differ between two evaluations (shuffles, file
listing order), which would break exactly-once replay. So the driver evaluates
the DataFrame once per job and writes it as Parquet files, and the subtasks read
those files as splits with a row offset as position. Which files those are is
decided once for the job: each driver stages into a directory of its own and
publishes it under the checkpoint store's fence, the first publication wins for
good, and later attempts and restores read the published copy without
evaluating the DataFrame again (:mod:`job_runtime.sources.staged_dataset`). The
subtasks learn the published location from the driver (``SourceContext``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from job_runtime.errors import UnpublishedInputError
from job_runtime.sources.files_source import FilesSource
from job_runtime.sources.source_contract import Source, SourceContext, Split, SplitReader
from job_runtime.sources.staged_dataset import stage_once
from job_runtime.sources.staging import DriverStaging


def spark_uri(uri: str) -> str:
    """The URI Spark writes ``uri`` at: ``file://`` for a local path, ``s3a://`` for S3."""
    if uri.startswith("s3://"):
        return "s3a://" + uri.removeprefix("s3://")
    if "://" in uri and not uri.startswith("file://"):
        return uri
    return "file://" + uri.removeprefix("file://")


class DataFrameSource(Source):
    name = "dataframe"
    prepares_on_driver = True

    def __init__(self, *, build: Callable[[Any], Any], name: str,
                 batch_size: int | None) -> None:
        self.build = build
        self.source_name = name
        self.batch_size = batch_size

    @property
    def staged_name(self) -> str:
        return self.source_name

    def prepare_on_driver(self, *, spark_context: Any, staging: DriverStaging) -> None:
        stage_once(staging=staging, name=self.source_name,
                   stage=lambda uri: self._write(spark_context, uri))

    def _write(self, spark_context: Any, uri: str) -> None:
        from pyspark.sql import SparkSession

        spark = SparkSession(spark_context)
        # The directory is this driver's own: nobody else's files can be in it.
        self.build(spark).write.mode("overwrite").parquet(spark_uri(uri))

    def _files(self, context: SourceContext) -> FilesSource:
        staged = context.staged_inputs.get(self.source_name)
        if staged is None:
            raise UnpublishedInputError(name=self.source_name)
        return FilesSource(paths=[staged.rstrip("/") + "/"], fmt="parquet",
                           pattern="*.parquet",
                           batch_size=self.batch_size or context.batch_size)

    def splits(self, *, context: SourceContext) -> list[Split]:
        return self._files(context).splits(context=context)

    def open(self, split: Split, position: Any, *, context: SourceContext) -> SplitReader:
        return self._files(context).open(split, position, context=context)


def dataframe(build: Callable[[Any], Any], *, name: str = "dataframe",
              batch_size: int | None = None) -> DataFrameSource:
    """Read the DataFrame that ``build(spark)`` returns, staged once per job.

    ``name``: what the staged copy is published under; each ``dataframe`` input of a
    job needs its own (a union of two with one name is refused: the second would
    read the first's copy). Keep it when the job changes: a restore reads the copy
    published under it.

    ``batch_size`` rows per batch; by default the pipeline's choice (larger when no
    Python function sees single records).
    """
    return DataFrameSource(build=build, name=name, batch_size=batch_size)
