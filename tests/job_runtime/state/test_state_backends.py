"""The keyed-state contract, run against every state backend a job may choose.

Each test takes a ``kind`` and builds backends through ``create_backend``, the way
a keyed operator does. A checkpoint goes through the same path as in a job: a full
snapshot is serialised, an incremental one uploads itself to checkpoint storage on
the local file system, and the restore reads the state files back from there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from job_runtime.records import key_group_of, key_group_range, operator_index_for_key_group
from job_runtime.state.backend import (
    BACKEND_KINDS,
    IncrementalSnapshot,
    KeyedStateBackend,
    StateBackendSettings,
)
from job_runtime.state.backends import create_backend, restore_keyed_state
from job_runtime.state.handles import ProcessContext

MAX_P = 128
KEYS: list[Any] = [0, 1, 41, -7, 2**40, "a", "user-17", "", "żółw", b"bytes", 1.5, ("a", 1)]


class Backends:
    """Makes backends of one kind and takes checkpoints of them into real storage."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.storage = CheckpointStorage(f"file://{tmp_path}/checkpoints", "job-u1")
        self.settings = StateBackendSettings(kind="rocksdb" if kind == "rocksdb" else "hashmap",
                                             local_dir=str(tmp_path / "local"),
                                             storage=self.storage)
        self.made: list[KeyedStateBackend] = []
        self._next_id = 0

    def make(self, key_groups: range = range(0, MAX_P), *, subtask: int = 0) -> KeyedStateBackend:
        backend = create_backend(self.settings, key_groups=key_groups, operator="count-1",
                                 subtask=subtask)
        self.made.append(backend)
        return backend

    def parallel(self, parallelism: int) -> list[KeyedStateBackend]:
        return [self.make(key_group_range(i, parallelism=parallelism, max_parallelism=MAX_P),
                          subtask=i) for i in range(parallelism)]

    def checkpoint(self, backend: KeyedStateBackend, *, subtask: int = 0) -> bytes:
        """The state file of one snapshot, as a restore reads it back."""
        self._next_id += 1
        snapshot = backend.snapshot()
        if isinstance(snapshot, IncrementalSnapshot):
            uploaded = snapshot.upload(storage=self.storage, checkpoint_id=self._next_id,
                                       operator="count-1", subtask=subtask)
            backend.notify_complete(self._next_id)
            return self.storage.read_state(uploaded.handle)
        return snapshot.serialize()

    def close(self) -> None:
        for backend in self.made:
            backend.close()


@pytest.fixture(params=BACKEND_KINDS)
def backends(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    made = Backends(request.param, tmp_path)
    yield made
    made.close()


def group(key: Any) -> int:
    return key_group_of(key, MAX_P)


class TestReadsAndWrites:
    def test_a_missing_key_reads_as_the_default(self, backends: Backends) -> None:
        backend = backends.make()
        assert backend.get("sum", group("x"), "x") is None
        assert backend.get("sum", group("x"), "x", 7) == 7

    def test_every_kind_of_key_keeps_its_own_value(self, backends: Backends) -> None:
        backend = backends.make()
        for i, key in enumerate(KEYS):
            backend.put("sum", group(key), key, {"n": i})
        assert [backend.get("sum", group(k), k) for k in KEYS] == [{"n": i}
                                                                  for i in range(len(KEYS))]
        assert backend.key_count() == len(KEYS)

    def test_states_with_different_names_do_not_share_keys(self, backends: Backends) -> None:
        backend = backends.make()
        backend.put("a", group("k"), "k", 1)
        backend.put("ab", group("k"), "k", 2)
        assert (backend.get("a", group("k"), "k"), backend.get("ab", group("k"), "k")) == (1, 2)
        assert [(k, v) for _, k, v in backend.iter_entries("a")] == [("k", 1)]

    def test_a_deleted_key_is_gone_and_deleting_a_missing_one_is_harmless(
            self, backends: Backends) -> None:
        backend = backends.make()
        backend.put("v", group(5), 5, "five")
        backend.delete("v", group(5), 5)
        backend.delete("v", group(6), 6)
        assert backend.get("v", group(5), 5) is None
        assert backend.key_count() == 0

    def test_iteration_yields_each_entry_with_its_key_group(self, backends: Backends) -> None:
        backend = backends.make()
        for key in range(300):
            backend.put("count", group(key), key, key * 2)
        backend.put("other", group(1), 1, "x")
        entries = list(backend.iter_entries("count"))
        assert sorted(k for _, k, _ in entries) == list(range(300))
        assert all(g == group(k) and v == k * 2 for g, k, v in entries)


class TestCheckpoints:
    def test_a_checkpoint_is_unaffected_by_later_writes(self, backends: Backends) -> None:
        backend = backends.make()
        for key in range(200):
            backend.put("sum", group(key), key, key * 10)
        blob = backends.checkpoint(backend)
        for key in range(200):
            if key % 3 == 0:
                backend.delete("sum", group(key), key)
            else:
                backend.put("sum", group(key), key, -1)
        backend.put("sum", group(1000), 1000, 0)

        restored = backends.make()
        assert restored.restore([blob]) == 200
        assert {k: v for _, k, v in restored.iter_entries("sum")} == {k: k * 10
                                                                      for k in range(200)}
        assert backend.get("sum", group(1), 1) == -1

    def test_restored_state_can_be_changed_and_checkpointed_again(
            self, backends: Backends) -> None:
        original = backends.make()
        original.put("v", group("a"), "a", 1)
        restored = backends.make()
        restored.restore([backends.checkpoint(original)])
        restored.put("v", group("a"), "a", 2)
        restored.put("v", group("b"), "b", 3)
        again = backends.make()
        again.restore([backends.checkpoint(restored)])
        assert (again.get("v", group("a"), "a"), again.get("v", group("b"), "b")) == (2, 3)

    @pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 2), (1, 4), (4, 1)])
    def test_restore_with_another_parallelism_gives_each_key_to_exactly_one_subtask(
            self, backends: Backends, before: int, after: int) -> None:
        keys = [*range(1500), *(f"user-{i}" for i in range(300))]
        old = backends.parallel(before)
        for key in keys:
            owner = operator_index_for_key_group(group(key), parallelism=before,
                                                 max_parallelism=MAX_P)
            old[owner].put("count", group(key), key, {"key": key})
        blobs = [backends.checkpoint(b, subtask=i) for i, b in enumerate(old)]

        new = backends.parallel(after)
        assert sum(b.restore(blobs) for b in new) == len(keys)
        holders: dict[Any, list[int]] = {}
        for subtask, backend in enumerate(new):
            assert backend.key_count() == len(list(backend.iter_entries("count")))
            for key_group, key, value in backend.iter_entries("count"):
                assert key_group in backend.key_groups and value == {"key": key}
                holders.setdefault(key, []).append(subtask)
        assert holders == {key: [operator_index_for_key_group(group(key), parallelism=after,
                                                              max_parallelism=MAX_P)]
                           for key in keys}


class TestStateHandles:
    def test_value_and_map_state_of_a_process_function(self, backends: Backends) -> None:
        backend = backends.make()
        ctx = ProcessContext(backend=backend, operator="process-1")
        ctx.set_key("u1", group("u1"))
        ctx.value_state("seen").update(3)
        clicks = ctx.map_state("clicks")
        clicks.put("home", 1)
        clicks.put("cart", 2)
        clicks.remove("home")
        ctx.set_key("u2", group("u2"))
        assert ctx.value_state("seen").value() is None
        assert not ctx.map_state("clicks").contains("cart")
        ctx.set_key("u1", group("u1"))
        assert ctx.value_state("seen").value() == 3
        assert dict(ctx.map_state("clicks").items()) == {"cart": 2}
        ctx.value_state("seen").clear()
        assert ctx.value_state("seen").value("none") == "none"


class TestSwitchingBackends:
    @pytest.mark.parametrize(("before", "after"), [("hashmap", "rocksdb"),
                                                   ("rocksdb", "hashmap")])
    @pytest.mark.parametrize("parallelism", [(2, 2), (2, 3)], ids=["same", "rescaled"])
    def test_a_checkpoint_of_one_backend_restores_into_the_other(
            self, tmp_path: Path, before: str, after: str,
            parallelism: tuple[int, int]) -> None:
        old_backends = Backends(before, tmp_path / "old")
        new_backends = Backends(after, tmp_path / "new")
        try:
            keys = [*range(800), *(f"user-{i}" for i in range(200))]
            old = old_backends.parallel(parallelism[0])
            for key in keys:
                owner = operator_index_for_key_group(group(key), parallelism=parallelism[0],
                                                     max_parallelism=MAX_P)
                old[owner].put("count", group(key), key, {"key": key})
            blobs = [old_backends.checkpoint(b, subtask=i) for i, b in enumerate(old)]
            new = new_backends.parallel(parallelism[1])
            restored = [restore_keyed_state(b, blobs, settings=new_backends.settings)
                        for b in new]
            assert sum(restored) == len(keys)
            found = {k: v for b in new for _, k, v in b.iter_entries("count")}
            assert found == {key: {"key": key} for key in keys}
        finally:
            old_backends.close()
            new_backends.close()
