"""Sources: ``sequence``, ``files``, ``dataframe`` and ``kafka``."""

from job_runtime.sources.dataframe import dataframe
from job_runtime.sources.files_source import files
from job_runtime.sources.kafka import kafka
from job_runtime.sources.sequence import sequence
from job_runtime.sources.source_contract import Source, SourceContext, Split, SplitReader

__all__ = ["Source", "SourceContext", "Split", "SplitReader", "dataframe", "files", "kafka",
           "sequence"]
