"""Starting Spark for the driver, in the background.

Starting Spark (its JVM, the local scheduler or the Kubernetes backend) is the
largest part of a restart. Nothing in it depends on the checkpoint store or the
restore point, so the driver starts it first, on a thread, and opens the store,
resolves and checks the checkpoint to restore and starts the coordinator while
the JVM boots; it waits for Spark only when it launches the barrier stage.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading
import time
from typing import Any

from job_runtime.errors import ConfigurationError
from job_runtime.execution.config import LOOPBACK
from job_runtime.execution.driver.driver_settings import DriverSettings
from job_runtime.execution.driver.jvm_archive import (
    ArchivePlan,
    finish_archive,
    plan_archive,
    with_archive,
)

WORKER_DAEMON = "job_runtime.execution.subtask.worker_daemon"
"""Spark's Python worker daemon with the subtask's code already imported (see there):
a relaunched subtask's worker starts in about a second instead of several."""

_LOCAL = re.compile(r"^local\[(\*|\d+)(?:,(\d+))?\]$")

_archive: ArchivePlan | None = None
"""What this process's JVM does with the class-data archive (one Spark per process,
as PySpark allows), for :func:`stop_spark_context` to finish."""


def is_local_master(master: str) -> bool:
    """Local mode (``local[...]``, also ``local-cluster[...]``): the job stays on this
    machine, so everything binds :data:`~job_runtime.execution.config.LOOPBACK`."""
    return master.startswith("local")


def resolve_master(master: str, *, parallelism: int, task_attempts: int) -> str:
    """``local[N]`` becomes ``local[N,F]``: Spark retries a failed task of the driver's
    other jobs (a source's preparation) as it would on a cluster. The barrier stage is
    relaunched by the driver, not retried by Spark (:mod:`relaunch`)."""
    match = _LOCAL.match(master)
    if not match:
        return master
    threads = os.cpu_count() or 1 if match.group(1) == "*" else int(match.group(1))
    if threads < parallelism:
        raise ConfigurationError(
            setting="spark.master",
            problem=f"{master} offers {threads} task slots but parallelism is {parallelism}; "
                    f"a barrier stage needs all subtasks at once (use local[{parallelism}])")
    attempts = int(match.group(2)) if match.group(2) else task_attempts
    return f"local[{threads},{attempts}]"


def check_parallelism(settings: DriverSettings) -> None:
    if settings.parallelism < 1 or settings.parallelism > settings.max_parallelism:
        raise ConfigurationError(setting="--parallelism",
                                 problem=f"must be within 1..{settings.max_parallelism}")


def start_early(settings: DriverSettings) -> SparkStarter | None:
    """Spark being started for ``settings`` now, before the driver imports the engine
    and loads the job, which then overlap the JVM's start; ``None`` for settings the
    driver will refuse (it says why without starting a JVM)."""
    try:
        check_parallelism(settings)
        master = resolve_master(settings.master, parallelism=settings.parallelism,
                                task_attempts=settings.task_attempts)
    except ConfigurationError:
        return None
    return SparkStarter(settings=settings, master=master)


class SparkStarter:
    """A ``SparkContext`` being created on a daemon thread.

    If the driver gives up before it needs Spark (a bad restore point, an
    unreachable store), it does not wait: the JVM ends with the driver process,
    whose pipe to it closes.
    """

    def __init__(self, *, settings: DriverSettings, master: str) -> None:
        self.started_at = time.time()
        self.ready_at: float | None = None
        self._settings = settings
        self._master = master
        self._context: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._start, daemon=True, name="spark-start")
        self._thread.start()

    def _start(self) -> None:
        try:
            self._context = start_spark_context(settings=self._settings, master=self._master)
        except BaseException as exc:
            self._error = exc
        self.ready_at = time.time()

    def context(self) -> Any:
        """The started ``SparkContext``; raises what starting it raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._context


def security_conf(*, master: str, user_conf: dict[str, str]) -> dict[str, str]:
    """Spark's own RPC authentication and encryption on Kubernetes, unless the job says otherwise.

    Executor pods reach the driver over the pod network, so Spark's RPC (which
    also carries the task closures, and with them this attempt's channel key)
    must be authenticated and encrypted there. Spark on Kubernetes generates the
    secret itself: the driver makes a random one per application and hands it to
    the executors as the ``_SPARK_AUTH_SECRET`` environment variable of their pod
    spec (readable by whoever may read pods in the namespace), unless
    ``spark.authenticate.secret.driver.file``/``.executor.file`` point at a mounted
    Secret. Local mode needs neither: everything stays on loopback in one pod.
    """
    if not master.startswith("k8s://"):
        return {}
    if user_conf.get("spark.authenticate", "true").strip().lower() != "true":
        return {}  # encryption needs authentication: the user turned both off
    wanted = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
    return {key: value for key, value in wanted.items() if key not in user_conf}


def start_spark_context(*, settings: DriverSettings, master: str) -> Any:
    """A ``SparkContext``, not a ``SparkSession``: the session's start costs about as
    much again and the barrier stage never needs it (see ``prepare_on_driver``).

    Python workers are reused: a warm standby's warm-up leaves workers that already
    imported the runtime, which its barrier stage then gets instead of forking and
    importing anew (seconds on a busy machine). Reuse never carries a failed subtask
    over: a worker whose task raised exits, and a killed one is gone. Workers that
    are forked (a relaunch after a crash) come from :data:`WORKER_DAEMON`, which
    imported the runtime once for all of them.
    """
    from pyspark import SparkConf, SparkContext

    # Python workers must run the driver's interpreter (the one with job_runtime).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if is_local_master(master):
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    conf = (SparkConf().setAppName(f"cjob-{settings.job_name}").setMaster(master)
            .set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false")
            .set("spark.python.worker.reuse", "true")
            .set("spark.python.daemon.module", WORKER_DAEMON)
            .set("spark.stage.maxConsecutiveAttempts", str(max(4, settings.task_attempts)))
            .set("spark.task.maxFailures", str(settings.task_attempts))
            .set("spark.sql.shuffle.partitions", "1")
            # A relaunch after a lost executor is a new Spark job, which Spark refuses
            # until enough task slots are registered again and then checks once per
            # interval (15 s by default): check every second, for as long in all.
            .set("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
            .set("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "600"))
    if is_local_master(master):
        conf = conf.set("spark.driver.host", LOOPBACK).set("spark.driver.bindAddress", LOOPBACK)
    for key, value in security_conf(master=master, user_conf=settings.spark_conf).items():
        conf = conf.set(key, value)
    # Only a local driver writes the archive: a driver pod's would die with the pod.
    global _archive
    _archive = plan_archive(spark_conf=settings.spark_conf, may_write=is_local_master(master))
    if _archive is not None and _archive.writing is not None:
        # A driver that ends without stopping Spark (a bad restore point, say) still
        # lets its JVM write the archive and puts it in place.
        atexit.register(_finish_archive_at_exit)
    for key, value in with_archive(settings.spark_conf, _archive).items():
        conf = conf.set(key, value)
    sc = SparkContext.getOrCreate(conf=conf)
    sc.setLogLevel("ERROR")
    return sc


def stop_spark_context(sc: Any) -> None:
    """Stop Spark for a driver that is about to exit.

    PySpark's ``SparkContext.stop`` ends by shutting its accumulator server down and
    waiting for it; once a Python task has run, that server's handler checks for the
    shutdown only once a second, so the wait added about half a second to every
    job's end. The server holds nothing a finished driver needs: it is told to stop
    and left to end with the process, while the JVM side stops as before (its
    temporary directories removed, executors released). A JVM that writes the
    class-data archive (:mod:`~job_runtime.execution.driver.jvm_archive`) is let
    end here, so that the archive is complete before the driver exits.
    """
    server = getattr(sc, "_accumulatorServer", None)
    sc._accumulatorServer = None
    gateway = getattr(sc, "_gateway", None)
    try:
        sc.stop()
    finally:
        if server is not None:
            server.server_shutdown = True
    _finish_archive(gateway)


def _finish_archive(gateway: Any) -> None:
    global _archive
    plan, _archive = _archive, None
    finish_archive(plan, gateway=gateway)


def _finish_archive_at_exit() -> None:
    from pyspark import SparkContext

    _finish_archive(SparkContext._gateway)
