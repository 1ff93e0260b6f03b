"""``cjob state show``: a local job's checkpointed state, by job name and checkpoint id
or by a checkpoint's path, printed by the runtime's ``state`` command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cjob.cli import main
from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata, KeyedStateHandle
from cjob_checkpoint.store.completed_store import CompletedCheckpoint
from cjob_checkpoint.store.file import FileCheckpointStore, advance_attempt
from job_runtime.records import key_group_of
from job_runtime.state.hashmap import HashMapStateBackend

MAX_P = 8


def checkpoint(storage: CheckpointStorage, checkpoint_id: int, *, counts: dict[str, int]) -> str:
    backend = HashMapStateBackend(key_groups=range(MAX_P))
    for key, count in counts.items():
        backend.put("visits/count", key_group_of(key, MAX_P), key, count)
    handle = storage.write_state(checkpoint_id, "visits", 0, backend.snapshot().serialize())
    metadata = CheckpointMetadata(
        job=storage.job_id, checkpoint_id=checkpoint_id, timestamp=0.0, final=False,
        attempt=1, parallelism=1, max_parallelism=MAX_P,
        operators={"visits": (KeyedStateHandle(subtask=0, handle=handle,
                                               key_groups=(0, MAX_P)),)})
    return storage.write_metadata(checkpoint_id, metadata.to_bytes())


def local_job(tmp_path: Path) -> Path:
    """A local job ``clicks`` with checkpoints 1 and 2 retained in its store."""
    state = tmp_path / "state"
    store = state / "clicks" / "store"
    store.mkdir(parents=True)
    advance_attempt(str(store), 1)
    writer = FileCheckpointStore(str(store), retained=3, attempt=1)
    storage = CheckpointStorage((tmp_path / "checkpoints").as_uri(), "clicks-u1")
    for checkpoint_id, counts in ((1, {"a": 1}), (2, {"a": 2, "b": 1})):
        path = checkpoint(storage, checkpoint_id, counts=counts)
        writer.add_checkpoint_and_subsume_oldest(CompletedCheckpoint(
            checkpoint_id=checkpoint_id, metadata_path=path, timestamp=0.0, attempt=1),
            discard=lambda found: None)
    return state


def rows(capfd: Any) -> dict[str, Any]:
    return {row["key"]: row["value"]
            for row in map(json.loads, capfd.readouterr().out.splitlines())}


def test_a_local_jobs_latest_or_named_checkpoint_is_shown(tmp_path: Path, capfd: Any) -> None:
    state = str(local_job(tmp_path))
    assert main(["state", "show", "clicks", "--state-dir", state, "--operator", "visits",
                 "-o", "json"]) == 0
    assert rows(capfd) == {"a": 2, "b": 1}
    assert main(["state", "show", "clicks", "--state-dir", state, "--checkpoint", "1",
                 "--operator", "visits", "-o", "json"]) == 0
    assert rows(capfd) == {"a": 1}
    assert main(["state", "show", "clicks", "--state-dir", state]) == 0
    assert capfd.readouterr().out.splitlines()[1].split()[0] == "visits"


def test_a_checkpoint_path_needs_no_job(tmp_path: Path, capfd: Any) -> None:
    local_job(tmp_path)
    path = tmp_path / "checkpoints" / "clicks-u1" / "chk-2"
    assert main(["state", "show", "--checkpoint", str(path), "--operator", "visits",
                 "--state", "count", "-o", "json"]) == 0
    assert rows(capfd) == {"a": 2, "b": 1}


def test_mistakes_are_one_line(tmp_path: Path, capfd: Any) -> None:
    state = str(local_job(tmp_path))
    assert main(["state", "show", "clicks", "--state-dir", state, "--checkpoint", "9"]) == 1
    assert capfd.readouterr().err == ("cjob: error: job 'clicks' retains no checkpoint 9 "
                                      "(it retains 1, 2)\n")
    assert main(["state", "show", "--checkpoint", "2"]) == 2
    assert "an id needs the job's name" in capfd.readouterr().err
    assert main(["state", "show", "nope", "--state-dir", state]) == 1
    assert main(["state", "show", "clicks", "--state-dir", state, "--operator", "x"]) == 2
    err = capfd.readouterr().err
    assert "holds no state of operator 'x'" in err and "Traceback" not in err
