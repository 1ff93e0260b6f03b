"""The runtime image's entrypoint, run with bash and a recording stand-in for ``java``:
Spark on Kubernetes starts executor pods with the argument ``executor`` and a set of
SPARK_* variables, and the entrypoint must turn them into the executor JVM."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from paths import REPO

ENTRYPOINT = REPO / "docker" / "spark-entrypoint.sh"

EXECUTOR_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@clicks-driver.team.svc:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "2",
    "SPARK_EXECUTOR_MEMORY": "4096m",
    "SPARK_APPLICATION_ID": "spark-application-1",
    "SPARK_EXECUTOR_POD_IP": "10.244.1.7",
    "SPARK_EXECUTOR_POD_NAME": "clicks-exec-3",
    "SPARK_RESOURCE_PROFILE_ID": "0",
}


@pytest.fixture
def fake_spark(tmp_path: Path) -> dict[str, str]:
    """A JAVA_HOME whose ``java`` prints its arguments, and a SPARK_HOME with jars."""
    java_home = tmp_path / "java"
    (java_home / "bin").mkdir(parents=True)
    java = java_home / "bin" / "java"
    java.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    java.chmod(0o755)
    spark_home = tmp_path / "spark"
    (spark_home / "jars").mkdir(parents=True)
    return {
        "PATH": os.environ["PATH"],
        "JAVA_HOME": str(java_home),
        "SPARK_HOME": str(spark_home),
        "HOSTNAME": "pod-host",
    }


def run_entrypoint(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_entrypoint_is_valid_bash_and_executable() -> None:
    subprocess.run(["bash", "-n", str(ENTRYPOINT)], check=True)
    assert os.access(ENTRYPOINT, os.X_OK)


def test_an_executor_pod_starts_the_kubernetes_executor_backend(
    fake_spark: dict[str, str],
) -> None:
    proc = run_entrypoint("executor", env={**fake_spark, **EXECUTOR_ENV})
    assert proc.returncode == 0, proc.stderr
    argv = proc.stdout.splitlines()
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in argv
    assert flag(argv, "--driver-url") == EXECUTOR_ENV["SPARK_DRIVER_URL"]
    assert flag(argv, "--executor-id") == "3"
    assert flag(argv, "--cores") == "2"
    assert flag(argv, "--app-id") == "spark-application-1"
    assert flag(argv, "--hostname") == "10.244.1.7"
    assert flag(argv, "--resourceProfileId") == "0"
    assert flag(argv, "--podName") == "clicks-exec-3"
    assert "-Xmx4096m" in argv and "-Xms4096m" in argv
    assert flag(argv, "-cp").endswith(f"{fake_spark['SPARK_HOME']}/jars/*")


def test_executor_java_options_keep_the_drivers_numeric_order(
    fake_spark: dict[str, str],
) -> None:
    options = {f"SPARK_JAVA_OPT_{i}": f"-Dopt.{i}=v" for i in range(12)}
    proc = run_entrypoint("executor", env={**fake_spark, **EXECUTOR_ENV, **options})
    assert proc.returncode == 0, proc.stderr
    argv = proc.stdout.splitlines()
    given = [a for a in argv if a.startswith("-Dopt.")]
    assert given == [f"-Dopt.{i}=v" for i in range(12)]
    # JVM options come before the main class, or the JVM would not see them.
    main = argv.index("org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend")
    assert argv.index("-Dopt.11=v") < main


def test_an_ipv6_pod_address_is_bracketed(fake_spark: dict[str, str]) -> None:
    env = {**fake_spark, **EXECUTOR_ENV, "SPARK_EXECUTOR_POD_IP": "fd00::7"}
    proc = run_entrypoint("executor", env=env)
    assert flag(proc.stdout.splitlines(), "--hostname") == "[fd00::7]"


def test_the_mounted_spark_conf_dir_goes_first_on_the_classpath(
    fake_spark: dict[str, str], tmp_path: Path
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    env = {**fake_spark, **EXECUTOR_ENV, "SPARK_CONF_DIR": str(conf)}
    proc = run_entrypoint("executor", env=env)
    assert flag(proc.stdout.splitlines(), "-cp").startswith(f"{conf}:")


def test_an_executor_without_a_driver_url_fails_with_a_clear_message(
    fake_spark: dict[str, str],
) -> None:
    env = {**fake_spark, **EXECUTOR_ENV}
    del env["SPARK_DRIVER_URL"]
    proc = run_entrypoint("executor", env=env)
    assert proc.returncode != 0
    assert "SPARK_DRIVER_URL" in proc.stderr


def test_any_other_command_runs_as_given(fake_spark: dict[str, str]) -> None:
    proc = run_entrypoint("python3", "-c", "print('driver ran')", env=fake_spark)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "driver ran\n"


def test_the_exit_code_of_the_command_is_the_containers(fake_spark: dict[str, str]) -> None:
    proc = run_entrypoint("python3", "-c", "raise SystemExit(75)", env=fake_spark)
    assert proc.returncode == 75
