"""A benchmark worker is done when it exits, whatever it leaves running.

PySpark's JVM, a child of the worker, inherits the worker's output; once the worker
had printed its report and exited, a JVM still shutting down kept that output open
and the benchmark waited for it until its timeout (half an hour at 5 GiB of state).
"""

from __future__ import annotations

import sys
import textwrap
import time

from bench.ss_rocksdb_state import run_worker_process


def test_the_worker_is_done_when_it_exits_and_its_leftover_children_are_stopped() -> None:
    leftover = "import time; time.sleep(120)"
    code = textwrap.dedent(f"""\
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", {leftover!r}])
        print("REPORT 42", flush=True)
        """)
    started = time.monotonic()
    returncode, output = run_worker_process([sys.executable, "-c", code], timeout=60)
    assert time.monotonic() - started < 30, "waited for the leftover child"
    assert returncode == 0
    assert "REPORT 42" in output


def test_a_worker_that_runs_past_its_timeout_is_stopped_and_said_so() -> None:
    started = time.monotonic()
    returncode, output = run_worker_process(
        [sys.executable, "-c", "print('begun', flush=True); import time; time.sleep(120)"],
        timeout=2)
    assert returncode is None
    assert "begun" in output
    assert time.monotonic() - started < 30
