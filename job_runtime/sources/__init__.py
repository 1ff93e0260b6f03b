"""Sources: ``sequence``, ``files``, ``dataframe`` and ``kafka``."""

from job_runtime.sources.base import Source, SourceContext, Split, SplitReader
from job_runtime.sources.dataframe import dataframe
from job_runtime.sources.files import files
from job_runtime.sources.kafka import kafka
from job_runtime.sources.sequence import sequence

__all__ = ["Source", "SourceContext", "Split", "SplitReader", "dataframe", "files", "kafka",
           "sequence"]
