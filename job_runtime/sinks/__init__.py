"""Sinks: exactly-once ``files``, ``kafka``, ``delta``, ``iceberg`` and ``write_ahead``
(for any system), ``print`` and ``discard``."""

from job_runtime.sinks.arrival import CheckpointCommitter
from job_runtime.sinks.delta import delta
from job_runtime.sinks.failures import RejectedRecordError
from job_runtime.sinks.files_sink import files
from job_runtime.sinks.iceberg import iceberg
from job_runtime.sinks.kafka import kafka
from job_runtime.sinks.print import discard
from job_runtime.sinks.print import print_ as print
from job_runtime.sinks.sink_contract import Sink, SinkContext, SinkWriter
from job_runtime.sinks.write_ahead import write_ahead

__all__ = ["CheckpointCommitter", "RejectedRecordError", "Sink", "SinkContext", "SinkWriter",
           "delta", "discard", "files", "iceberg", "kafka", "print", "write_ahead"]
