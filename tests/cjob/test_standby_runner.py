"""``cjob run`` with ``spec.standby``: a failed driver is replaced by promoting the standby.

The drivers are the scripted stand-in (``stub_driver.py``), the store a real file store:
what is checked is the runner's part, that the standby is started, that it is promoted
only after the fence moved to the new attempt, and that the driver it replaces cannot
commit any more.
"""

from __future__ import annotations

import io
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from paths import SUPPORT

from cjob.embedded import EmbeddedRunner, RunOptions
from cjob_checkpoint.store.completed_store import CompletedCheckpoint, FencedError
from cjob_checkpoint.store.file import FileCheckpointStore
from cjob_spec import load_job_file

STUB = SUPPORT / "stub_driver.py"


def run_with_standby(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, exits: str,
                     standby: bool = True) -> tuple[int, str, dict[str, Any]]:
    monkeypatch.setenv("STUB_EXITS", exits)
    monkeypatch.setenv("STUB_SECONDS", "2")
    job = tmp_path / "job.yaml"
    job.write_text(textwrap.dedent(f"""\
        apiVersion: checkpointed.io/v1alpha1
        kind: CheckpointedJob
        metadata: {{name: demo, uid: uid-1}}
        spec:
          job: {{entrypoint: "job:build"}}
          parallelism: 1
          spark: {{master: "local[1]"}}
          checkpoint: {{storage: "file:///unused", interval: 1s}}
          restartPolicy: {{type: OnFailure, maxRestarts: 3, backoff: {{initial: 0s, max: 1s}}}}
          standby: {{enabled: {json.dumps(standby)}}}
        """))
    out = io.StringIO()
    runner = EmbeddedRunner(
        job=load_job_file(str(job)),
        options=RunOptions(state_dir=str(tmp_path / "state"), fresh=True, out=out,
                           base_dir=str(tmp_path), driver_command=(sys.executable, str(STUB))))
    code = runner.run()
    status = json.loads((tmp_path / "state" / "demo" / "status.json").read_text())
    return code, out.getvalue(), status


def test_a_killed_driver_is_replaced_by_its_promoted_standby(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, output, status = run_with_standby(tmp_path, monkeypatch, exits="137,0")
    assert code == 0, output
    assert "starting attempt 2 (restore: latest, promoted standby demo-standby-1" in output
    assert status["phase"] == "Succeeded"
    assert (status["attempt"], status["restarts"]) == (2, 1)
    assert status["driverPod"] == "demo-standby-1"


def test_the_promoted_standby_finds_the_store_already_fenced_to_its_attempt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The stub exits 9 when the fence is not its attempt at promotion; twice in a row,
    # so the second standby is promoted too.
    code, output, status = run_with_standby(tmp_path, monkeypatch, exits="137,137,0")
    assert code == 0, output
    assert status["attempt"] == 3
    assert status["driverPod"] == "demo-standby-2"
    store = tmp_path / "state" / "demo" / "store"
    assert (store / "attempt").read_text().strip() == "3"


def test_the_driver_a_standby_replaced_can_no_longer_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, output, _ = run_with_standby(tmp_path, monkeypatch, exits="137,0")
    assert code == 0, output
    zombie = FileCheckpointStore(str(tmp_path / "state" / "demo" / "store"), retained=3,
                                 attempt=1)
    with pytest.raises(FencedError):
        zombie.add_checkpoint_and_subsume_oldest(CompletedCheckpoint(
            checkpoint_id=99, metadata_path="file:///x/chk-99/_metadata", timestamp=1.0),
            discard=lambda _checkpoint: None)


def test_without_a_standby_every_restart_starts_a_new_driver(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, output, status = run_with_standby(tmp_path, monkeypatch, exits="137,0",
                                            standby=False)
    assert code == 0, output
    assert "promoted standby" not in output
    assert status["driverPod"] == "demo-attempt-2"
    assert not list((tmp_path / "state" / "demo").glob("*standby*"))
