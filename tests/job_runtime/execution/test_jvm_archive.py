"""Which class-data archive a driver's JVM maps or writes, and what the job keeps.

The archive only ever saves time: a driver maps the one named after its Java and
class path, writes one only where it runs many times (local mode) and only one
driver at a time, and leaves a job's own Java options first and its own archive alone.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from job_runtime.execution.driver.jvm_archive import (
    OPTIONS_KEY,
    STALE_CLAIM,
    ArchivePlan,
    archive_name,
    plan_archive,
    with_archive,
)


@pytest.fixture
def java_home(tmp_path: Path) -> Path:
    """A JDK's layout: ``bin/java`` and the ``release`` file the name depends on."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    (home / "release").write_text('JAVA_VERSION="17.0.15"\n')
    return home


@pytest.fixture
def env(tmp_path: Path, java_home: Path) -> dict[str, str]:
    return {"JAVA_HOME": str(java_home), "CJOB_JVM_ARCHIVE_DIR": str(tmp_path / "archives")}


class TestTheArchivesName:
    def test_another_jdk_build_names_another_archive(self, java_home: Path) -> None:
        java = java_home / "bin" / "java"
        before = archive_name(java=java, spark_conf={}, jars=["spark-core.jar"])
        (java_home / "release").write_text('JAVA_VERSION="17.0.16"\n')
        assert archive_name(java=java, spark_conf={}, jars=["spark-core.jar"]) != before

    def test_jars_the_job_adds_name_another_archive(self, java_home: Path) -> None:
        java = java_home / "bin" / "java"
        plain = archive_name(java=java, spark_conf={}, jars=["spark-core.jar"])
        assert archive_name(java=java, spark_conf={"spark.jars": "/k.jar"},
                            jars=["spark-core.jar"]) != plain
        assert archive_name(java=java, spark_conf={}, jars=["spark-core.jar", "x.jar"]) != plain

    def test_settings_outside_the_class_path_keep_the_name(self, java_home: Path) -> None:
        java = java_home / "bin" / "java"
        assert (archive_name(java=java, spark_conf={"spark.driver.memory": "4g"}, jars=[])
                == archive_name(java=java, spark_conf={}, jars=[]))


class TestWhatADriverDoes:
    def test_a_local_driver_without_an_archive_writes_one_at_its_exit(
            self, env: dict[str, str]) -> None:
        plan = plan_archive(spark_conf={}, may_write=True, env=env)
        assert plan is not None and plan.writing is not None
        assert not plan.path.exists()
        assert f"-XX:ArchiveClassesAtExit={plan.writing}" in plan.java_options()

    def test_a_driver_maps_an_archive_that_exists(self, env: dict[str, str]) -> None:
        first = plan_archive(spark_conf={}, may_write=True, env=env)
        assert first is not None and first.writing is not None
        first.path.write_bytes(b"archive")
        first.writing.unlink()
        plan = plan_archive(spark_conf={}, may_write=False, env=env)
        assert plan == ArchivePlan(path=first.path)
        assert f"-XX:SharedArchiveFile={first.path}" in plan.java_options()

    def test_a_driver_that_may_not_write_starts_without_one(self, env: dict[str, str]) -> None:
        assert plan_archive(spark_conf={}, may_write=False, env=env) is None

    def test_only_one_driver_writes_an_archive_at_a_time(self, env: dict[str, str]) -> None:
        assert plan_archive(spark_conf={}, may_write=True, env=env) is not None
        assert plan_archive(spark_conf={}, may_write=True, env=env) is None

    def test_the_claim_of_a_driver_that_was_killed_is_taken_over(
            self, env: dict[str, str]) -> None:
        killed = plan_archive(spark_conf={}, may_write=True, env=env)
        assert killed is not None and killed.writing is not None
        old = time.time() - STALE_CLAIM - 60
        os.utime(killed.writing, (old, old))
        assert plan_archive(spark_conf={}, may_write=True, env=env) == killed

    def test_turned_off_the_jvm_starts_without_one(self, env: dict[str, str]) -> None:
        assert plan_archive(spark_conf={}, may_write=True,
                            env={**env, "CJOB_JVM_ARCHIVE": "off"}) is None

    @pytest.mark.parametrize("option", ["-XX:SharedArchiveFile=/mine.jsa",
                                        "-XX:ArchiveClassesAtExit=/mine.jsa"])
    def test_a_jobs_own_archive_is_left_alone(self, env: dict[str, str], option: str) -> None:
        assert plan_archive(spark_conf={OPTIONS_KEY: f"-Xmx2g {option}"}, may_write=True,
                            env=env) is None

    def test_without_java_there_is_nothing_to_plan(self, tmp_path: Path) -> None:
        assert plan_archive(spark_conf={}, may_write=True,
                            env={"JAVA_HOME": str(tmp_path / "none"), "PATH": ""}) is None


def test_the_jobs_own_java_options_stay_first(tmp_path: Path) -> None:
    plan = ArchivePlan(path=tmp_path / "a.jsa")
    conf = with_archive({OPTIONS_KEY: "-Dfoo=1", "spark.driver.memory": "2g"}, plan)
    assert conf[OPTIONS_KEY].startswith("-Dfoo=1 -XX:SharedArchiveFile=")
    assert conf["spark.driver.memory"] == "2g"
    assert with_archive({"spark.driver.memory": "2g"}, None) == {"spark.driver.memory": "2g"}
