"""The command line starts Spark before the driver loads the job, except for settings
the driver will refuse: those get their one-line error without a JVM started first."""

from __future__ import annotations

import dataclasses

import pytest

from job_runtime.execution.driver import spark_start
from job_runtime.execution.driver.driver_settings import DriverSettings

SETTINGS = DriverSettings(job_name="j", job_uid="u", entrypoint="m:f", parallelism=2,
                          master="local[2]")


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The masters a SparkStarter was made for (none is: no JVM in a unit test)."""
    masters: list[str] = []
    monkeypatch.setattr(spark_start, "SparkStarter",
                        lambda *, settings, master: masters.append(master) or master)
    return masters


@pytest.mark.parametrize("change", [
    {"parallelism": 0}, {"parallelism": 300, "max_parallelism": 256, "master": "local[300]"},
    {"master": "local[1]"},
], ids=["no subtask", "above max parallelism", "fewer task slots than subtasks"])
def test_settings_the_driver_refuses_start_no_jvm(started: list[str],
                                                    change: dict[str, object]) -> None:
    assert spark_start.start_early(dataclasses.replace(SETTINGS, **change)) is None
    assert started == []


def test_good_settings_start_spark_on_the_master_the_driver_resolves(
        started: list[str]) -> None:
    spark_start.start_early(SETTINGS)
    assert started == ["local[2,4]"]
