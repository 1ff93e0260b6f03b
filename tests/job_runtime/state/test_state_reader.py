"""Reading a checkpoint's keyed state as Arrow: what the backends wrote, read back
through the checkpoint's ``_metadata`` as a restore reads it, whatever the backend."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata, KeyedStateHandle, OperatorDescriptor
from job_runtime.operators.accumulators import accumulator_specs
from job_runtime.operators.key_table import KeyTable
from job_runtime.operators.keyed import _AggregateSnapshot
from job_runtime.records import key_group_of
from job_runtime.state.backend import KeyedStateBackend
from job_runtime.state.checkpoint_reader import StateReadError, operators, read
from job_runtime.state.hashmap import HashMapStateBackend
from job_runtime.state.rocksdb import RocksDBStateBackend
from job_runtime.state.ttl import Expiring
from job_runtime.state_show import show_state

MAX_P = 16
HALVES = (range(0, 8), range(8, 16))
KEYS = ["alice", "bob", "carol", "dave", "erin", "frank"]


def group(key: Any) -> int:
    return key_group_of(key, MAX_P)


def fill(backend: KeyedStateBackend, keys: list[str]) -> None:
    """What a reduce and a process function keep: the reduce's value under the
    operator's uid, the function's value and map states under ``uid/<name>``."""
    for index, key in enumerate(keys):
        if group(key) not in backend.key_groups:
            continue
        backend.put("sums", group(key), key, {"user": key, "total": index * 10})
        backend.put("visits/count", group(key), key, index + 1)
        backend.put("visits/pages", group(key), key, {"/home": index, "/cart": 2 * index})
        backend.put("visits/session", group(key), key,
                    Expiring(value=f"s-{key}", expires_at=2_000_000_000_000))


def write_checkpoint(tmp_path: Path, files: dict[str, list[KeyedStateHandle]], *,
                     storage: CheckpointStorage,
                     pipeline: tuple[OperatorDescriptor, ...] = ()) -> str:
    metadata = CheckpointMetadata(
        job=storage.job_id, checkpoint_id=7, timestamp=0.0, final=False, attempt=1,
        parallelism=2, max_parallelism=MAX_P,
        operators={uid: tuple(handles) for uid, handles in files.items()},
        pipeline=pipeline or None)
    return storage.write_metadata(7, metadata.to_bytes())


def hashmap_checkpoint(tmp_path: Path, *, uid: str, keys: list[str]) -> str:
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints", "job-u1")
    handles = []
    for subtask, groups in enumerate(HALVES):
        backend = HashMapStateBackend(key_groups=groups)
        fill(backend, keys)
        data = backend.snapshot().serialize()
        handles.append(KeyedStateHandle(subtask=subtask, key_groups=(groups.start, groups.stop),
                                        handle=storage.write_state(7, uid, subtask, data)))
    return write_checkpoint(tmp_path, {uid: handles}, storage=storage)


def by_key(table: pa.Table) -> dict[str, Any]:
    return {row["key"]: row["value"] for row in table.to_pylist()}


# --- record state ----------------------------------------------------------------------


def test_a_process_functions_states_are_read_by_name_across_every_subtask(
        tmp_path: Path) -> None:
    metadata = hashmap_checkpoint(tmp_path, uid="visits", keys=KEYS)

    counts = read(metadata, operator="visits", state="count")
    assert counts.column_names == ["key_group", "key", "state", "value"]
    assert by_key(counts) == {key: index + 1 for index, key in enumerate(KEYS)}
    assert counts.column("value").type == pa.int64()
    assert {row["key_group"] for row in counts.to_pylist()} == {group(k) for k in KEYS}
    # A map state is one value per key; a TTL'd value is read as its value.
    assert by_key(read(metadata, operator="visits", state="pages"))["bob"] == \
        {"/home": 1, "/cart": 2}
    assert by_key(read(metadata, operator="visits", state="session"))["erin"] == "s-erin"
    # Without a state name, every state of the operator; pandas is one call away.
    frame = read(metadata, operator="visits").to_pandas()
    assert sorted(set(frame["state"])) == ["count", "pages", "session", "sums"]
    assert len(frame) == 4 * len(KEYS)


def test_a_reduce_state_is_its_value_and_records_become_structs(tmp_path: Path) -> None:
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints", "job-u1")
    backend = HashMapStateBackend(key_groups=range(0, MAX_P))
    for index, key in enumerate(KEYS):
        backend.put("sums", group(key), key, {"user": key, "total": index * 10})
    handle = storage.write_state(7, "sums", 0, backend.snapshot().serialize())
    metadata = write_checkpoint(tmp_path, {"sums": [KeyedStateHandle(
        subtask=0, key_groups=(0, MAX_P), handle=handle)]}, storage=storage)

    table = read(metadata, operator="sums")
    assert set(table.column("state").to_pylist()) == {"value"}
    assert pa.types.is_struct(table.column("value").type)
    assert by_key(table)["carol"] == {"user": "carol", "total": 20}


def test_values_arrow_cannot_type_as_one_column_are_read_as_json(tmp_path: Path) -> None:
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints", "job-u1")
    backend = HashMapStateBackend(key_groups=range(0, MAX_P))
    backend.put("mixed/v", group("a"), "a", 1)
    backend.put("mixed/v", group("b"), "b", "one")
    handle = storage.write_state(7, "mixed", 0, backend.snapshot().serialize())
    metadata = write_checkpoint(tmp_path, {"mixed": [KeyedStateHandle(
        subtask=0, key_groups=(0, MAX_P), handle=handle)]}, storage=storage)

    assert by_key(read(metadata, operator="mixed")) == {"a": "1", "b": '"one"'}


def test_values_json_cannot_hold_are_read_as_their_repr(tmp_path: Path) -> None:
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints", "job-u1")
    backend = HashMapStateBackend(key_groups=range(0, MAX_P))
    backend.put("timed/__timers", group("a"), "a", {("event_time", 5): True})
    backend.put("timed/__timers", group("b"), "b", 7)
    handle = storage.write_state(7, "timed", 0, backend.snapshot().serialize())
    metadata = write_checkpoint(tmp_path, {"timed": [KeyedStateHandle(
        subtask=0, key_groups=(0, MAX_P), handle=handle)]}, storage=storage)

    assert by_key(read(metadata, operator="timed")) == {
        "a": "{('event_time', 5): True}", "b": "7"}


def test_rocksdb_state_reads_as_the_hashmap_state_of_the_same_entries(tmp_path: Path) -> None:
    storage = CheckpointStorage(f"file://{tmp_path}/rocks", "job-u1")
    handles = []
    for subtask, groups in enumerate(HALVES):
        backend = RocksDBStateBackend(key_groups=groups, operator="visits", subtask=subtask,
                                      local_dir=str(tmp_path / f"local-{subtask}"),
                                      storage=storage)
        try:
            fill(backend, KEYS)
            uploaded = backend.snapshot().upload(storage=storage, checkpoint_id=7,
                                                 operator="visits", subtask=subtask)
        finally:
            backend.close()
        handles.append(KeyedStateHandle(subtask=subtask, key_groups=(groups.start, groups.stop),
                                        handle=uploaded.handle, shared=uploaded.shared))
    rocks = write_checkpoint(tmp_path, {"visits": handles}, storage=storage)
    hashmap = hashmap_checkpoint(tmp_path, uid="visits", keys=KEYS)

    from_rocks = read(rocks, operator="visits").sort_by([("key", "ascending"),
                                                        ("state", "ascending")])
    from_hashmap = read(hashmap, operator="visits").sort_by([("key", "ascending"),
                                                            ("state", "ascending")])
    assert from_rocks.to_pylist() == from_hashmap.to_pylist()
    assert list((tmp_path / "local-0").glob("**/cjob-state-*")) == []


# --- aggregates ------------------------------------------------------------------------


def test_an_aggregates_accumulators_are_columns_beside_its_key(tmp_path: Path) -> None:
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints", "job-u1")
    table = KeyTable(specs=accumulator_specs((("n", "count", None), ("total", "sum", "amount"))),
                     max_parallelism=MAX_P)
    keys = pa.array(KEYS)
    slots = table.slots(keys)
    table.merge(slots, {"count": np.arange(1, 7, dtype=np.int64),
                        "sum:amount": np.arange(6, dtype=np.float64) * 2.5})
    data = _AggregateSnapshot(table.snapshot()).serialize()
    handle = storage.write_state(7, "per-user", 0, data)
    described = OperatorDescriptor(uid="per-user", kind="aggregate", stage=1, key="user",
                                   state="count,sum:amount")
    metadata = write_checkpoint(tmp_path, {"per-user": [KeyedStateHandle(
        subtask=0, key_groups=(0, MAX_P), handle=handle)]}, storage=storage,
        pipeline=(described,))

    read_back = read(metadata, operator="per-user")
    assert set(read_back.column_names) == {"key_group", "user", "count", "sum:amount"}
    rows = {row["user"]: row for row in read_back.to_pylist()}
    assert rows["carol"]["count"] == 3 and rows["carol"]["sum:amount"] == 5.0
    assert rows["carol"]["key_group"] == group("carol")
    with pytest.raises(StateReadError, match="no state names"):
        read(metadata, operator="per-user", state="count")
    (listed,) = operators(metadata)
    assert (listed.uid, listed.kind, listed.key, listed.subtasks) == \
        ("per-user", "aggregate", "user", 1)


# --- mistakes --------------------------------------------------------------------------


def test_an_operator_without_state_is_refused_naming_those_with_state(tmp_path: Path) -> None:
    metadata = hashmap_checkpoint(tmp_path, uid="visits", keys=KEYS)
    with pytest.raises(StateReadError, match=r"holds no state of operator 'vists'.*visits"):
        read(metadata, operator="vists")


def test_an_unknown_state_name_is_refused_naming_the_states(tmp_path: Path) -> None:
    metadata = hashmap_checkpoint(tmp_path, uid="visits", keys=KEYS)
    with pytest.raises(StateReadError, match=r"no state named 'cnt'.*count, pages"):
        read(metadata, operator="visits", state="cnt")


def test_a_path_that_is_no_checkpoint_is_refused_in_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(StateReadError, match="cannot read the checkpoint"):
        read(f"file://{tmp_path}/checkpoints/job-u1/chk-3", operator="visits")


# --- the command that prints it --------------------------------------------------------


def show(**kwargs: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = show_state(out=out, err=err, **{"limit": 20, **kwargs})
    return code, out.getvalue(), err.getvalue()


def test_the_command_lists_the_operators_then_prints_one_state_as_a_table(
        tmp_path: Path) -> None:
    metadata = hashmap_checkpoint(tmp_path, uid="visits", keys=KEYS)
    code, out, _ = show(checkpoint=metadata, operator=None, state=None)
    assert code == 0
    assert out.splitlines()[0].split() == ["OPERATOR", "KIND", "KEY", "SUBTASKS", "SIZE"]
    assert out.splitlines()[1].split()[:4] == ["visits", "-", "-", "2"]

    code, out, _ = show(checkpoint=metadata, operator="visits", state="count", limit=4)
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == ["KEY_GROUP", "KEY", "STATE", "VALUE"]
    assert len(lines) == 1 + 4 + 1 and lines[-1] == \
        f"(4 of {len(KEYS)} rows; --limit 0 or -o json for all)"


def test_json_lines_hold_every_row_whole(tmp_path: Path) -> None:
    metadata = hashmap_checkpoint(tmp_path, uid="visits", keys=KEYS)
    code, out, _ = show(checkpoint=metadata, operator="visits", state="pages", output="json",
                        limit=2)
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(rows) == len(KEYS)
    assert {row["key"]: row["value"] for row in rows}["dave"] == {"/home": 3, "/cart": 6}


def test_the_commands_mistakes_are_one_line_with_the_restores_exit_codes(
        tmp_path: Path) -> None:
    metadata = hashmap_checkpoint(tmp_path, uid="visits", keys=KEYS)
    code, out, err = show(checkpoint=metadata, operator="nope", state=None)
    assert (code, out) == (2, "") and err.count("\n") == 1 and "visits" in err
    code, _, err = show(checkpoint=metadata, operator=None, state="count")
    assert code == 2 and "--operator" in err
    code, _, err = show(checkpoint=str(tmp_path / "missing"), operator="visits", state=None)
    assert code == 6 and err.startswith("error: cannot read the checkpoint")


def test_the_runtime_command_prints_the_state_as_json_lines(tmp_path: Path) -> None:
    metadata = hashmap_checkpoint(tmp_path, uid="visits", keys=KEYS)
    done = subprocess.run([sys.executable, "-m", "job_runtime", "state", "--checkpoint",
                           metadata.removesuffix("/_metadata"), "--operator", "visits",
                           "--state", "count", "-o", "json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert {row["key"]: row["value"] for row in rows} == {k: i + 1 for i, k in enumerate(KEYS)}
