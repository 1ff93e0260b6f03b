"""Validate a CheckpointedJob document once and turn it into the typed model.

``parse_job`` is the single gate every document passes, whether it comes from the API
server (the operator) or from a file (``cjob run``): unknown fields, wrong types, bad
enums, durations and quantities, and combinations that cannot run (more subtasks
than Spark task slots, unaligned checkpoints without exactly-once) are refused here
with a ``SpecError`` that names the field. Defaults are applied here too; they and
the bounds come from ``cjob_spec.defaults``, their one place, and each section's fields
and the values' patterns from ``cjob_spec.schema``, which the CRD is rendered from.

A null value counts as absent, as the API server treats nulls of non-nullable fields.
"""

from cjob_spec.names import MAX_JOB_NAME_LENGTH
from cjob_spec.parse.checkpoint import S3_STORAGE_PATTERN
from cjob_spec.parse.job import load_job_file, parse_job
from cjob_spec.parse.spark_settings import DRIVER_REQUEST_CORES, MASTER_PATTERN

__all__ = [
    "DRIVER_REQUEST_CORES",
    "MASTER_PATTERN",
    "MAX_JOB_NAME_LENGTH",
    "S3_STORAGE_PATTERN",
    "load_job_file",
    "parse_job",
]
