"""Two live drivers of one job stage its ``dataframe`` source at once.

A false "driver lost" report starts attempt 2 while attempt 1 still runs. Here
attempt 1 is slow inside ``build`` and attempt 2 stages, publishes and runs; then
attempt 1 finishes staging a differently cut DataFrame, and attempt 2's subtasks
restore a checkpoint whose positions name rows of attempt 2's staged files. Those
files must still be what it reads: the output stays exactly once.
"""

from __future__ import annotations

import time
from pathlib import Path

from runtime_harness import JobHarness

from cjob_checkpoint.store.file import FileBackend
from cjob_checkpoint.store.staged_inputs import StagedInputs

COUNT = 3000
WAIT = 240.0


def _wait_until_exists(path: Path, *, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not path.exists():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.2)


def test_a_fenced_driver_staging_late_does_not_change_what_the_newer_attempt_restores(
        harness: JobHarness) -> None:
    base = harness.base
    common = {"count": COUNT, "output": str(harness.output), "reduce_delay": 0.002}
    older = harness.start(entrypoint="staging_jobs:contested_dataframe", attempt=1, args={
        **common, "partitions": 3, "descending": False,
        "building": str(base / "older-building"), "release": str(base / "older-release")})
    try:
        _wait_until_exists(base / "older-building", what="attempt 1 builds its DataFrame")
        newer = harness.start(entrypoint="staging_jobs:contested_dataframe", attempt=2, args={
            **common, "partitions": 4, "descending": True, "pause_at": COUNT // 2,
            "paused": str(base / "newer-paused"), "resume": str(base / "newer-resume")})
        try:
            _wait_until_exists(base / "newer-paused", what="attempt 2 runs from its staging")
            (base / "older-release").touch()
            ended = harness.finish(older, attempt=1)
            (base / "newer-resume").touch()
            run = harness.finish(newer, attempt=2)
        finally:
            (base / "newer-resume").touch()
    finally:
        (base / "older-release").touch()

    assert ended.returncode != 0, "the fenced attempt 1 went on with the job"
    assert "attempt 1 may not publish" in ended.output, ended.explain()
    assert run.returncode == 0, run.explain()
    assert run.status is not None and run.status["subtaskRestarts"] >= 1
    assert harness.running_sum_problems(count=COUNT) == []
    state = FileBackend(str(harness.store)).read()
    published = StagedInputs.decode(state.staged_inputs).get("numbers")
    assert published is not None and published.attempt == 2
    assert Path(published.uri.removeprefix("file://"), "_SUCCESS").exists()
