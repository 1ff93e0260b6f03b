"""The driver's JVM class-data archive, with real drivers: written once, then mapped,
and never a reason for a job to fail.

A JVM told ``-Xshare:on`` refuses to start unless it maps its archives, so a driver
run with it shows that the archive the first driver wrote is the one the next maps.
"""

from __future__ import annotations

from pathlib import Path

from runtime_harness import JobHarness

from job_runtime.execution.driver.jvm_archive import plan_archive

COUNT = 600
ARGS = {"count": COUNT, "rate": 3000}


def _run(harness: JobHarness, archives: Path, *, attempt: int, extra: list[str] | None = None,
         ) -> str:
    run = harness.run(entrypoint="crashing_jobs:running_sum",
                      args={**ARGS, "output": str(harness.base / f"output-{attempt}")},
                      attempt=attempt, env={"CJOB_JVM_ARCHIVE_DIR": str(archives)},
                      extra=extra or [])
    assert run.returncode == 0, run.explain()
    assert run.status is not None and run.status["state"] == "finished"
    return run.output


def test_the_first_local_driver_writes_the_archive_and_the_next_one_maps_it(
        harness: JobHarness, tmp_path: Path) -> None:
    archives = tmp_path / "archives"
    writing = _run(harness, archives, attempt=1)
    assert "cds" not in writing.lower(), "the JVM's notes on what it archived reached the log"
    written = sorted(p.name for p in archives.iterdir())
    assert len(written) == 1 and written[0].endswith(".jsa"), written

    output = _run(harness, archives, attempt=2,
                  extra=["--spark-conf", "spark.driver.extraJavaOptions=-Xshare:on"])
    assert sorted(p.name for p in archives.iterdir()) == written
    assert "cds" not in output.lower(), "the JVM's notes on its archive reached the job's log"


def test_a_damaged_archive_costs_the_job_nothing_but_time(
        harness: JobHarness, tmp_path: Path) -> None:
    archives = tmp_path / "archives"
    plan = plan_archive(spark_conf={}, may_write=False,
                        env={"CJOB_JVM_ARCHIVE_DIR": str(archives)} | _java_env())
    assert plan is None, "no archive exists yet"
    first = plan_archive(spark_conf={}, may_write=True,
                         env={"CJOB_JVM_ARCHIVE_DIR": str(archives)} | _java_env())
    assert first is not None and first.writing is not None
    first.writing.unlink()
    first.path.write_bytes(b"\x00garbage" * 4096)

    output = _run(harness, archives, attempt=1).lower()
    assert "cds" not in output and "shared archive" not in output, output[-2000:]


def _java_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k in ("JAVA_HOME", "PATH", "HOME")}
