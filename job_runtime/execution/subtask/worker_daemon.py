"""Spark's Python worker daemon, with the subtask's code imported before it forks.

Spark starts one daemon per executor and forks a worker from it for every task; a
fresh worker then imports PySpark's worker and, unpickling the barrier stage's
function, the runtime with Arrow and pandas: seconds on a busy machine, paid again by
every subtask that Spark relaunches after a crash. Imported here once, in the daemon,
every forked worker inherits them.

Spark's own daemon imports nothing before forking because a library that starts
threads at import would leave a forked child with locks held by threads it does not
have. What is imported here starts no threads at import (Arrow's and pandas' pools
start on first use), and ``tests/job_runtime/spark/test_recovery_spark.py`` runs relaunches
with it. PySpark itself is imported from its installed package when Spark's zip of it
is that package's own (:mod:`.worker_path`): from the zip it is compiled anew each time.
"""

from __future__ import annotations

import importlib
import sys

from job_runtime.execution.subtask import SUBTASK_MODULES
from job_runtime.execution.subtask.worker_path import installed_first

# Before PySpark is imported: its installed package rather than Spark's zip of it.
sys.path[:] = installed_first(sys.path)

import pyspark.worker  # noqa: E402, F401 - inherited by every forked worker
from pyspark.daemon import manager  # noqa: E402

for _module in SUBTASK_MODULES:
    importlib.import_module(_module)

if __name__ == "__main__":
    manager()
