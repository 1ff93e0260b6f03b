"""Sinks: exactly-once ``files``, ``print`` and ``discard``."""

from job_runtime.sinks.base import Sink, SinkContext, SinkWriter
from job_runtime.sinks.files import files
from job_runtime.sinks.print import discard
from job_runtime.sinks.print import print_ as print

__all__ = ["Sink", "SinkContext", "SinkWriter", "discard", "files", "print"]
