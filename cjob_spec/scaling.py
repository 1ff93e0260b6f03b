"""A job at another parallelism, with the Spark task slots that parallelism needs.

The barrier stage runs every subtask at once, so a parallelism needs as many task
slots: with ``spark.master: k8s`` the executors are added (``instances``) for a larger
one; a ``local[N]`` master has N slots, which bound any parallelism chosen for it. The
autoscaler chooses within these bounds, and runs the job it applies through here.
"""

from __future__ import annotations

import dataclasses
import re

from cjob_spec.model import CheckpointedJob, SparkSpec
from cjob_spec.schema import patterns

LOCAL_MASTER = re.compile(patterns.LOCAL_MASTER)


def task_cpus(spark: SparkSpec) -> int:
    text = spark.conf.get("spark.task.cpus", "1")
    return int(text) if text.isdigit() and int(text) > 0 else 1


def slot_limit(spark: SparkSpec) -> int | None:
    """The most subtasks the master can run at once, or None when executors are added
    as needed (Kubernetes) or the master takes every core (``local[*]``)."""
    if spark.is_kubernetes:
        return None
    match = LOCAL_MASTER.match(spark.master)
    if match is None or match.group(1) == "*":
        return None
    return max(1, int(match.group(1)) // task_cpus(spark))


def rescaled(job: CheckpointedJob, parallelism: int) -> CheckpointedJob:
    """``job`` at ``parallelism``, with enough executors on Kubernetes (never fewer
    than the spec asks for)."""
    spec = job.spec
    spark = spec.spark
    if spark.is_kubernetes:
        per_executor = max(1, spark.executor.cores // task_cpus(spark))
        needed = -(-parallelism // per_executor)
        if needed > spark.executor.instances:
            executor = dataclasses.replace(spark.executor, instances=needed)
            spark = dataclasses.replace(spark, executor=executor)
    return dataclasses.replace(job, spec=dataclasses.replace(spec, parallelism=parallelism,
                                                             spark=spark))
