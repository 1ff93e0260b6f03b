"""``spec.spark``: the master, the Spark configuration (without the settings the
operator manages), driver and executor resources, and whether they give the barrier
stage a task slot for every subtask."""

from __future__ import annotations

import re
from collections.abc import Mapping

from cjob_spec import defaults
from cjob_spec.errors import SpecError
from cjob_spec.errors import describe_value as _describe
from cjob_spec.model import DriverResources, ExecutorResources, SparkSpec
from cjob_spec.parse.node import Node
from cjob_spec.schema import patterns

MASTER_PATTERN = re.compile(patterns.LOCAL_MASTER)


RESERVED_SPARK_CONF: dict[str, str] = {
    "spark.master": "use spec.spark.master",
    "spark.submit.deployMode": "the driver always runs in client mode inside its pod",
    "spark.driver.host": "set by the operator to the driver's headless service",
    "spark.driver.port": "set by the operator",
    "spark.driver.bindAddress": "set by the operator",
    "spark.driver.blockManager.port": "set by the operator",
    "spark.kubernetes.namespace": "the job's namespace is used",
    "spark.kubernetes.driver.pod.name": "set by the operator",
    "spark.kubernetes.container.image": "use spec.image",
    "spark.kubernetes.executor.podNamePrefix": "set by the operator",
    "spark.driver.memory": "use spec.spark.driver.memory",
    "spark.driver.cores": "use spec.spark.driver.cores",
    "spark.executor.instances": "use spec.spark.executor.instances",
    "spark.executor.cores": "use spec.spark.executor.cores",
    "spark.executor.memory": "use spec.spark.executor.memory",
    "spark.dynamicAllocation.enabled": "barrier stages cannot run with dynamic allocation",
    "spark.kubernetes.executor.podTemplateFile":
        "set by the operator; use spec.pod.securityContext and containerSecurityContext",
    "spark.kubernetes.executor.podTemplateContainerName": "set by the operator",
    "spark.kubernetes.executor.disableConfigMap":
        "the operator turns it on, so the driver needs no ConfigMap rights",
}
RESERVED_SPARK_CONF_PREFIXES: dict[str, str] = {
    "spark.kubernetes.authenticate.": "the driver uses its pod's service account",
}


def read_spark(node: Node) -> SparkSpec:
    master = node.string(defaults.SPARK_MASTER.key, default=defaults.SPARK_MASTER.default)
    assert master is not None
    if master != "k8s" and not MASTER_PATTERN.match(master):
        raise SpecError(
            field="spec.spark.master",
            problem=f"must be 'k8s', 'local[N]', 'local[*]' or 'local[N,F]', got {master!r}",
        )
    conf = _read_spark_conf(node.get("conf"), node.at("conf"))
    driver = node.child(
        "driver",
        lambda child: DriverResources(
            cores=child.integer_field(defaults.DRIVER_CORES),
            memory=child.memory_field(defaults.DRIVER_MEMORY),
        ),
        default=DriverResources,
    )
    executor = node.child(
        "executor",
        lambda child: ExecutorResources(
            instances=child.integer_field(defaults.EXECUTOR_INSTANCES),
            cores=child.integer_field(defaults.EXECUTOR_CORES),
            memory=child.memory_field(defaults.EXECUTOR_MEMORY),
        ),
        default=ExecutorResources,
    )
    return SparkSpec(master=master, conf=conf, driver=driver, executor=executor)


def _read_spark_conf(value: object, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(field=path, problem=f"must be a mapping, got {_describe(value)}")
    conf: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key.startswith("spark."):
            raise SpecError(
                field=f"{path}.{key}", problem="Spark configuration keys start with 'spark.'"
            )
        hint = RESERVED_SPARK_CONF.get(key) or next(
            (why for prefix, why in RESERVED_SPARK_CONF_PREFIXES.items() if key.startswith(prefix)),
            None,
        )
        if hint is not None:
            raise SpecError(field=f"{path}.{key}", problem="is managed by the operator", hint=hint)
        if isinstance(item, bool) or not isinstance(item, str | int):
            raise SpecError(
                field=f"{path}.{key}",
                problem=f"must be a string or an integer, got {_describe(item)}",
                hint="quote booleans and decimals, e.g. 'true'",
            )
        conf[key] = str(item)
    request = conf.get(DRIVER_REQUEST_CORES)
    if request is not None and not _is_cpu_quantity(request):
        raise SpecError(field=f"{path}.{DRIVER_REQUEST_CORES}",
                        problem=f"must be a CPU quantity above 0, got {request!r}",
                        hint="e.g. '500m' or '1'; the driver pod's CPU request")
    return conf


DRIVER_REQUEST_CORES = "spark.kubernetes.driver.request.cores"
"""Spark's setting for the driver pod's CPU request, which ``spark.driver.cores`` (whole
cores, the driver's threads) otherwise sets: honoured as Spark honours it."""
CPU_QUANTITY = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+|[0-9]+m)$")


def _is_cpu_quantity(text: str) -> bool:
    if not CPU_QUANTITY.match(text):
        return False
    return (float(text[:-1]) / 1000 if text.endswith("m") else float(text)) > 0


def check_task_slots(spark: SparkSpec, parallelism: int) -> None:
    """A barrier stage needs all its subtasks running at once, so it needs that many slots."""
    task_cpus_text = spark.conf.get("spark.task.cpus", "1")
    task_cpus = int(task_cpus_text) if task_cpus_text.isdigit() and int(task_cpus_text) > 0 else 1
    if spark.is_kubernetes:
        executor = spark.executor
        slots = executor.instances * (executor.cores // task_cpus)
        if slots < parallelism:
            raise SpecError(
                field="spec.parallelism",
                problem=f"needs {parallelism} Spark task slots but the executors give {slots} "
                f"(instances {executor.instances} x cores {executor.cores}"
                + (f" / spark.task.cpus {task_cpus}" if task_cpus != 1 else "")
                + ")",
                hint="all subtasks of a barrier stage run at once",
            )
        return
    match = MASTER_PATTERN.match(spark.master)
    assert match is not None
    if match.group(1) != "*":
        slots = int(match.group(1)) // task_cpus
        if slots < parallelism:
            raise SpecError(
                field="spec.parallelism",
                problem=f"needs {parallelism} Spark task slots but master {spark.master} "
                f"gives {slots}",
                hint="all subtasks of a barrier stage run at once",
            )
