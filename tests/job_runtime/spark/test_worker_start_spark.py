"""The driver's Spark starts Python workers with the subtask's code already imported,
imported from the installed PySpark rather than Spark's zip of it, and stops without
waiting for PySpark's accumulator server.

A relaunched subtask (Spark relaunches the whole barrier stage after a crash) runs in
freshly forked workers; importing the runtime, Arrow and pandas there took seconds of
every relaunch on a busy machine. The driver's Spark forks its workers from a daemon
that imported them once. Checked in a separate process: one ``SparkContext`` per
process, as in a driver.

After a Python task ran, PySpark's ``SparkContext.stop`` waited up to a second for
its accumulator server's handler; the driver's stop leaves that server to the
process's end, and must still stop the JVM side.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyspark
import pytest
from runtime_harness import REPO, runtime_env

PYSPARK_INSTALLED = pyspark.__file__

PROBE = textwrap.dedent("""\
    from job_runtime.execution.driver.driver_settings import DriverSettings
    from pyspark import SparkContext

    from job_runtime.execution.driver.spark_start import start_spark_context, stop_spark_context

    def probe():
        def loaded(_):
            import sys
            return sorted(m for m in ("job_runtime.execution.subtask.runtime",
                                      "job_runtime.execution.subtask.source_task",
                                      "job_runtime.execution.subtask.keyed_task", "pyarrow")
                          if m in sys.modules) + [sys.modules["pyspark"].__file__]
        return loaded

    settings = DriverSettings(job_name="probe", job_uid="u", entrypoint="x:y", parallelism=2)
    sc = start_spark_context(settings=settings, master="local[2,2]")
    server = sc._accumulatorServer
    try:
        print("LOADED", sc.parallelize(range(2), 2).map(probe()).collect())
    finally:
        stop_spark_context(sc)
    print("STOPPED", sc._jsc is None, SparkContext._active_spark_context is None,
          server.server_shutdown)
    """)


@pytest.fixture(scope="module")
def probed() -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=runtime_env(None),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_a_freshly_forked_python_worker_has_the_subtask_code_imported_before_its_task(
        probed: list[str]) -> None:
    line = next(line for line in probed if line.startswith("LOADED"))
    expected = ["job_runtime.execution.subtask.keyed_task", "job_runtime.execution.subtask.runtime",
                "job_runtime.execution.subtask.source_task", "pyarrow", PYSPARK_INSTALLED]
    assert line == f"LOADED {[expected, expected]}"


def test_the_workers_import_the_installed_pyspark_not_sparks_zip_of_it(
        probed: list[str]) -> None:
    """Compiled from source at every import from the zip; from the installed package
    with its cached bytecode."""
    line = next(line for line in probed if line.startswith("LOADED"))
    assert ".zip" not in line and PYSPARK_INSTALLED in line


def test_the_drivers_stop_stops_the_jvm_side_and_tells_the_accumulator_server_to_end(
        probed: list[str]) -> None:
    assert "STOPPED True True True" in probed
