"""A job whose ``dataframe`` source two live drivers of the same job stage at once.

Every driver run gives its own ``partitions`` and ``descending``, so two attempts
build differently cut and ordered DataFrames of the same numbers: positions of one
attempt's staged files mean other records in the other's. Files steer the race:

* ``building``/``release`` hold a driver inside ``build`` (it creates ``building``
  and waits until ``release`` exists), as a driver whose staging is slow;
* ``paused``/``resume`` hold a subtask at record ``pause_at`` (it creates ``paused``
  and waits until ``resume`` exists) and then kill its Python worker once, so the
  stage is relaunched and restores its latest checkpoint after whatever another
  driver did to the staging area meanwhile.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crashing_jobs import first_to_claim

from job_runtime import Pipeline, sinks, sources

KEYS = 97
WAIT_LIMIT = 200.0
"""Seconds a held driver or subtask waits before it gives up (a test that hangs fails)."""


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_LIMIT
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.1)


def _hold_build(args: dict[str, Any]) -> None:
    if args.get("release"):
        Path(args["building"]).touch()
        _wait_for(Path(args["release"]))


def _pause_then_crash(args: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    pause_at = int(args.get("pause_at", -1))
    paused = args.get("paused")

    def maybe_pause(record: dict[str, Any]) -> dict[str, Any]:
        if paused and record["seq"] == pause_at:
            if not first_to_claim(paused):
                return record
            _wait_for(Path(args["resume"]))
            os.kill(os.getpid(), signal.SIGKILL)
        return record

    return maybe_pause


def contested_dataframe(p: Pipeline) -> None:
    """Every key's running sum of ``seq`` over ``0..count-1``, staged from a DataFrame
    (source ``numbers``); what ``examples/running_sum/verify.py`` checks."""
    count = int(p.args["count"])
    partitions = int(p.args["partitions"])
    descending = bool(p.args.get("descending", False))
    delay = float(p.args.get("reduce_delay", 0.0))

    def build(spark: Any) -> Any:
        _hold_build(p.args)
        start, end, step = (count - 1, -1, -1) if descending else (0, count, 1)
        return spark.range(start, end, step, numPartitions=partitions) \
            .withColumnRenamed("id", "seq")

    def add(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        if delay:
            time.sleep(delay)
        return {"key": a["key"], "value": a["value"] + b["value"]}

    (p.source(sources.dataframe(build, name="numbers", batch_size=50))
     .map(_pause_then_crash(p.args))
     .map(lambda r: {"key": r["seq"] % KEYS, "value": r["seq"]})
     .key_by("key")
     .reduce(add)
     .sink(sinks.files(p.args["output"], format="jsonl")))
