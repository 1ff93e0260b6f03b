"""The ConfigMap store against a real kube-apiserver: CAS, fencing, pruning, faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

import pytest
from kubernetes import client as k8s_client
from paths import REPO as REPO_ROOT
from store_configmap_support import LossyApiProxy, StoreWorld

from cjob_checkpoint.checkpoint_storage import read_metadata
from cjob_checkpoint.store.completed_store import (
    AmbiguousWriteError,
    CompletedCheckpoint,
    FencedError,
    JobOutcome,
    StoreFullError,
    UnreadableCheckpointError,
)
from cjob_checkpoint.store.configmap import (
    ConfigMapCheckpointStore,
    NoRestorableCheckpointError,
    StoreNotFoundError,
    StoreUnavailableError,
    ensure_configmap,
    open_configmap_store,
    pointer_key,
    read_snapshot,
)
from cjob_checkpoint.store.file import CorruptPointerError, StoreClosedError
from e2e.controlplane.waiting import wait_for


def ids(checkpoints: list[CompletedCheckpoint]) -> list[int]:
    return [c.checkpoint_id for c in checkpoints]


def add(world: StoreWorld, store: ConfigMapCheckpointStore, checkpoint_id: int) -> list[int]:
    return ids(store.add_checkpoint_and_subsume_oldest(world.write_checkpoint(checkpoint_id),
                                                       discard=world.discard))


class TestAddingAndReading:
    def test_an_added_checkpoint_is_the_latest_and_is_stored_as_a_small_json_pointer(
        self, world: StoreWorld
    ) -> None:
        store = world.store()
        checkpoint = world.write_checkpoint(1)
        assert store.add_checkpoint_and_subsume_oldest(checkpoint, discard=world.discard) == []
        assert store.latest() == checkpoint
        stored = world.raw()["data"][pointer_key(1)]
        assert json.loads(stored)["path"] == checkpoint.metadata_path
        assert world.raw()["metadata"]["labels"] == {"checkpointed.io/job": world.job_name}

    def test_a_new_store_object_sees_what_an_earlier_one_committed(
        self, world: StoreWorld
    ) -> None:
        add(world, world.store(), 1)
        add(world, world.store(), 2)
        assert ids(world.store().all()) == [1, 2]

    def test_the_size_is_reported_for_a_metric_and_grows_with_pointers(
        self, world: StoreWorld
    ) -> None:
        store = world.store(retained=10)
        empty = store.size_bytes()
        add(world, store, 1)
        assert store.size_bytes(refresh=False) > empty
        assert store.size_bytes() == store.size_bytes(refresh=False)

    def test_a_missing_configmap_is_a_clear_error(self, world: StoreWorld) -> None:
        store = ConfigMapCheckpointStore(api=world.api, namespace=world.namespace,
                                         name="nobody-checkpoints", retained=1, attempt=1)
        with pytest.raises(StoreNotFoundError, match="does not exist; the operator creates it"):
            store.latest()

    def test_the_driver_opens_the_store_from_its_kubeconfig(
        self, world: StoreWorld, control_plane: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        store, counter = open_configmap_store(namespace=world.namespace, name=world.name,
                                              retained=2, attempt=1)
        checkpoint_id = counter.get_and_increment()
        store.add_checkpoint_and_subsume_oldest(world.write_checkpoint(checkpoint_id),
                                                discard=world.discard)
        assert ids(world.store().all()) == [checkpoint_id]

    def test_opening_the_store_of_a_missing_configmap_or_an_old_attempt_fails_at_once(
        self, world: StoreWorld, control_plane: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
        with pytest.raises(StoreNotFoundError):
            open_configmap_store(namespace=world.namespace, name="nobody-checkpoints",
                                 retained=1, attempt=1)
        world.advance(2)
        with pytest.raises(FencedError, match="attempt 2 owns the store"):
            open_configmap_store(namespace=world.namespace, name=world.name, retained=1,
                                 attempt=1)


class TestRetention:
    def test_retaining_one_keeps_only_the_newest_and_deletes_the_older_data(
        self, world: StoreWorld
    ) -> None:
        store = world.store(retained=1)
        assert add(world, store, 1) == []
        assert add(world, store, 2) == [1]
        assert add(world, store, 3) == [2]
        assert ids(store.all()) == [3]
        assert world.data_ids() == [3]
        assert world.pointer_keys() == [pointer_key(3)]
        assert not any(k.startswith("discarding-") for k in world.raw()["data"])

    def test_retaining_ten_keeps_the_ten_newest(self, world: StoreWorld) -> None:
        store = world.store(retained=10)
        for checkpoint_id in range(1, 15):
            add(world, store, checkpoint_id)
        assert ids(store.all()) == list(range(5, 15))
        assert world.data_ids() == list(range(5, 15))
        assert sorted(world.discarded) == [1, 2, 3, 4]

    def test_an_older_checkpoint_added_late_never_displaces_the_newest(
        self, world: StoreWorld
    ) -> None:
        store = world.store(retained=1)
        add(world, store, 5)
        assert add(world, store, 3) == [3]
        assert ids(store.all()) == [5] and world.data_ids() == [5]

    def test_a_failing_discard_keeps_the_checkpoint_marked_and_the_next_add_retries(
        self, world: StoreWorld
    ) -> None:
        store = world.store(retained=1)
        add(world, store, 1)

        def broken(checkpoint: CompletedCheckpoint) -> None:
            raise OSError("storage unavailable")

        assert store.add_checkpoint_and_subsume_oldest(world.write_checkpoint(2),
                                                       discard=broken) == []
        assert ids(store.all()) == [2]
        assert store.marked_for_discard() == [1]
        assert world.has_data(1)
        assert add(world, store, 3) == [1, 2]
        assert store.marked_for_discard() == [] and world.data_ids() == [3]


class TestConcurrentWriters:
    def run_writers(self, world: StoreWorld, control_plane: Any, *, retained: int,
                    per_writer: int) -> list[int]:
        taken: list[int] = []
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def writer() -> None:
            api = k8s_client.CoreV1Api(control_plane.new_api_client())
            store = world.store(retained=retained, api=api)
            counter = world.counter(api=api)
            try:
                start.wait()
                for _ in range(per_writer):
                    checkpoint_id = counter.get_and_increment()
                    taken.append(checkpoint_id)
                    store.add_checkpoint_and_subsume_oldest(
                        world.write_checkpoint(checkpoint_id), discard=world.discard)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=writer) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        return taken

    def test_two_writers_lose_no_pointer_and_never_share_an_id(
        self, world: StoreWorld, control_plane: Any
    ) -> None:
        taken = self.run_writers(world, control_plane, retained=100, per_writer=12)
        assert len(set(taken)) == len(taken) == 24
        assert ids(world.store().all()) == sorted(taken)
        assert world.discarded == []

    def test_two_writers_with_retention_keep_exactly_the_newest(
        self, world: StoreWorld, control_plane: Any
    ) -> None:
        taken = self.run_writers(world, control_plane, retained=3, per_writer=10)
        newest = sorted(taken)[-3:]
        assert ids(world.store().all()) == newest
        assert world.data_ids() == newest
        assert world.store().marked_for_discard() == []
        assert not set(world.discarded) & set(newest)


class TestFencing:
    def test_a_zombie_of_an_older_attempt_cannot_add(self, world: StoreWorld) -> None:
        zombie = world.store(attempt=1, retained=1)
        add(world, zombie, 1)
        world.advance(2)
        with pytest.raises(FencedError, match="attempt 1 may not write"):
            add(world, zombie, 2)
        assert ids(world.store(attempt=2).all()) == [1]
        assert world.discarded == [] and world.data_ids() == [1, 2]

    def test_a_zombie_cannot_take_a_checkpoint_id(self, world: StoreWorld) -> None:
        zombie = world.counter(attempt=1)
        assert zombie.get_and_increment() == 1
        world.advance(2)
        with pytest.raises(FencedError):
            zombie.get_and_increment()
        with pytest.raises(FencedError):
            zombie.set_count(50)
        assert world.counter(attempt=2).get_and_increment() == 2

    def test_a_zombie_cannot_prune(self, world: StoreWorld) -> None:
        store = world.store(attempt=1, retained=3)
        for checkpoint_id in (1, 2, 3):
            add(world, store, checkpoint_id)
        world.advance(2)
        zombie = world.store(attempt=1, retained=1)
        with pytest.raises(FencedError):
            zombie.prune(discard=world.discard)
        assert ids(world.store(attempt=2).all()) == [1, 2, 3]
        assert world.discarded == [] and world.data_ids() == [1, 2, 3]

    def test_a_fence_moved_while_deleting_stops_the_zombie_and_the_new_attempt_cleans_up(
        self, world: StoreWorld
    ) -> None:
        zombie = world.store(attempt=1, retained=1)
        add(world, zombie, 1)

        def discard_while_fenced(checkpoint: CompletedCheckpoint) -> None:
            world.advance(2)  # the operator starts attempt 2 in the middle of phase two
            world.discard(checkpoint)

        with pytest.raises(FencedError):
            zombie.add_checkpoint_and_subsume_oldest(world.write_checkpoint(2),
                                                     discard=discard_while_fenced)
        successor = world.store(attempt=2, retained=1)
        assert ids(successor.all()) == [2]
        assert successor.marked_for_discard() == [1]
        assert add(world, successor, 3) == [1, 2]
        assert world.pointer_keys() == [pointer_key(3)]
        assert world.data_ids() == [3]

    def test_the_fence_never_moves_backwards(self, world: StoreWorld) -> None:
        world.advance(3)
        world.advance(3)
        with pytest.raises(FencedError, match="attempt 3 owns the store"):
            world.advance(2)
        assert read_snapshot(api=world.api, namespace=world.namespace,
                             name=world.name).fence_attempt == 3

    def test_a_writer_of_a_newer_attempt_takes_the_fence_over(self, world: StoreWorld) -> None:
        add(world, world.store(attempt=4), 1)
        assert world.raw()["metadata"]["annotations"]["checkpointed.io/fence-attempt"] == "4"
        with pytest.raises(FencedError):
            add(world, world.store(attempt=3), 2)


CRASHING_DRIVER = """
import os, sys
from kubernetes import client, config
from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.store.completed_store import CompletedCheckpoint
from cjob_checkpoint.store.configmap import ConfigMapCheckpointStore

namespace, name, root, job_id, crash_at = sys.argv[1:6]
api = client.CoreV1Api(config.new_client_from_config(config_file=os.environ["KUBECONFIG"]))
store = ConfigMapCheckpointStore(api=api, namespace=namespace, name=name, retained=1, attempt=1)
storage = CheckpointStorage(root, job_id)
storage.write_state(2, "reduce", 0, b"state")
path = storage.write_metadata(2, b'{"job": "x"}')
if crash_at == "before-pointer":
    os._exit(9)
if crash_at == "before-prune":
    ConfigMapCheckpointStore.prune = lambda self, *, discard: os._exit(9)

def crash_while_deleting(checkpoint):
    os._exit(9)

store.add_checkpoint_and_subsume_oldest(
    CompletedCheckpoint(checkpoint_id=2, metadata_path=path, timestamp=2.0, attempt=1),
    discard=crash_while_deleting)
"""


class TestCrashes:
    def crash_driver(self, world: StoreWorld, control_plane: Any, *, crash_at: str) -> None:
        env = dict(os.environ, KUBECONFIG=str(control_plane.kubeconfig),
                   PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
        done = subprocess.run(
            [sys.executable, "-c", CRASHING_DRIVER, world.namespace, world.name,
             world.storage.root_uri, world.storage.job_id, crash_at],
            env=env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 9, done.stderr

    def test_a_crash_between_writing_data_and_the_pointer_leaves_no_dangling_pointer(
        self, world: StoreWorld, control_plane: Any
    ) -> None:
        store = world.store(retained=1)
        add(world, store, 1)
        self.crash_driver(world, control_plane, crash_at="before-pointer")
        assert world.data_ids() == [1, 2]  # the orphan has data but no pointer
        assert ids(store.all()) == [1]
        restorable, notes = store.latest_restorable(storage_reader=read_metadata,
                                                    fallback=False)
        assert restorable is not None and restorable.checkpoint_id == 1 and notes == []

    def test_a_crash_between_commit_and_pruning_loses_no_latest_and_the_next_add_cleans_up(
        self, world: StoreWorld, control_plane: Any
    ) -> None:
        store = world.store(retained=1)
        add(world, store, 1)
        self.crash_driver(world, control_plane, crash_at="before-prune")
        latest = store.latest()
        assert latest is not None and latest.checkpoint_id == 2
        assert world.data_ids() == [1, 2]
        assert add(world, world.store(retained=1), 3) == [1, 2]
        assert world.pointer_keys() == [pointer_key(3)] and world.data_ids() == [3]

    def test_a_crash_while_deleting_leaves_a_marked_entry_that_the_next_add_finishes(
        self, world: StoreWorld, control_plane: Any
    ) -> None:
        store = world.store(retained=1)
        add(world, store, 1)
        self.crash_driver(world, control_plane, crash_at="while-deleting")
        assert ids(store.all()) == [2]
        assert store.marked_for_discard() == [1]
        assert add(world, world.store(retained=1), 3) == [1, 2]
        assert world.pointer_keys() == [pointer_key(3)] and world.data_ids() == [3]


class TestApiserverFaults:
    def test_a_lost_answer_to_the_commit_is_ambiguous_deletes_nothing_and_is_reconciled(
        self, world: StoreWorld, lossy_proxy: LossyApiProxy
    ) -> None:
        store = world.store(retained=1, api=lossy_proxy.api())
        add(world, store, 1)
        lossy_proxy.lose_answers(method="PUT")
        with pytest.raises(AmbiguousWriteError, match="no checkpoint data was deleted"):
            add(world, store, 2)
        assert len(lossy_proxy.lost) == 1 and "-> 200" in lossy_proxy.lost[0]
        assert world.discarded == [] and world.data_ids() == [1, 2]
        assert ids(world.store(retained=1).all()) == [1, 2]  # the write did land
        assert add(world, store, 3) == [1, 2]
        assert world.data_ids() == [3]

    def test_an_apiserver_restarting_mid_write_is_ambiguous_then_unavailable_then_fine(
        self, world: StoreWorld, lossy_proxy: LossyApiProxy
    ) -> None:
        store = world.store(retained=1, api=lossy_proxy.api(), max_attempts=2,
                            request_timeout=(2.0, 10.0))
        add(world, store, 1)
        lossy_proxy.refuse_answers(method="PUT", status=503)
        with pytest.raises(AmbiguousWriteError, match="HTTP 503"):
            add(world, store, 2)
        lossy_proxy.stop()
        with pytest.raises(StoreUnavailableError, match="apiserver is unavailable"):
            add(world, store, 3)
        assert world.discarded == [] and world.data_ids() == [1, 2, 3]
        lossy_proxy.start()
        assert add(world, store, 4) == [1]
        assert ids(world.store().all()) == [4]
        # 2 and 3 never got a pointer: their data stays until someone removes orphans.
        assert world.data_ids() == [2, 3, 4]

    def test_a_lost_answer_to_an_increment_never_hands_out_an_id_twice(
        self, world: StoreWorld, lossy_proxy: LossyApiProxy
    ) -> None:
        counter = world.counter(api=lossy_proxy.api())
        first = counter.get_and_increment()
        lossy_proxy.lose_answers(method="PUT")
        second = counter.get_and_increment()
        third = counter.get_and_increment()
        assert lossy_proxy.lost and first < second < third
        assert counter.get() == third + 1


class TestRestorable:
    def fill(self, world: StoreWorld, *checkpoint_ids: int) -> ConfigMapCheckpointStore:
        store = world.store(retained=10)
        for checkpoint_id in checkpoint_ids:
            add(world, store, checkpoint_id)
        return store

    def test_a_pointer_to_deleted_data_fails_clearly_without_fallback(
        self, world: StoreWorld
    ) -> None:
        store = self.fill(world, 1, 2, 3)
        world.storage.discard(store.all()[-1])
        with pytest.raises(UnreadableCheckpointError, match=r"checkpoint 3 .* does not exist"):
            store.latest_restorable(storage_reader=world.read_metadata, fallback=False)

    def test_with_fallback_the_newest_readable_checkpoint_is_chosen_with_notes(
        self, world: StoreWorld
    ) -> None:
        store = self.fill(world, 1, 2, 3)
        for checkpoint in store.all()[1:]:
            world.storage.discard(checkpoint)
        chosen, notes = store.latest_restorable(storage_reader=read_metadata, fallback=True)
        assert chosen is not None and chosen.checkpoint_id == 1
        assert len(notes) == 2 and "checkpoint 3 is unreadable" in notes[0]

    def test_when_nothing_is_readable_even_the_fallback_fails_clearly(
        self, world: StoreWorld
    ) -> None:
        store = self.fill(world, 1, 2)
        for checkpoint in store.all():
            world.storage.discard(checkpoint)
        with pytest.raises(NoRestorableCheckpointError, match="no older retained checkpoint"):
            store.latest_restorable(storage_reader=read_metadata, fallback=True)

    def test_an_empty_store_has_nothing_to_restore(self, world: StoreWorld) -> None:
        assert world.store().latest_restorable(storage_reader=read_metadata,
                                               fallback=False) == (None, [])

    def test_a_damaged_pointer_is_an_error_unless_falling_back(self, world: StoreWorld) -> None:
        store = self.fill(world, 1)
        world.api.patch_namespaced_config_map(world.name, world.namespace,
                                              {"data": {pointer_key(2): "{not json"}})
        with pytest.raises(CorruptPointerError):
            store.latest()
        assert store.latest(skip_corrupt=True) is not None
        with pytest.raises(CorruptPointerError, match="not a valid checkpoint pointer"):
            store.latest_restorable(storage_reader=read_metadata, fallback=False)
        chosen, notes = store.latest_restorable(storage_reader=read_metadata, fallback=True)
        assert chosen is not None and chosen.checkpoint_id == 1
        assert "checkpoint 2 is unreadable" in notes[0]


class TestSizeBudget:
    def test_a_pointer_that_would_cross_the_budget_is_refused_and_not_written(
        self, world: StoreWorld
    ) -> None:
        probe = world.store()
        budget = probe.size_bytes() + 2 * len(world.write_checkpoint(1).to_json()) + 200
        store = world.store(retained=10, budget_bytes=budget)
        added: list[int] = []
        with pytest.raises(StoreFullError, match=f"budget of {budget} bytes"):
            for checkpoint_id in range(1, 10):
                add(world, store, checkpoint_id)
                added.append(checkpoint_id)
        assert 1 <= len(added) < 9
        assert ids(store.all()) == added
        assert store.size_bytes() <= budget
        assert world.discarded == []


class TestLifecycle:
    def test_shutdown_keeps_the_checkpoints_of_a_finished_job(self, world: StoreWorld) -> None:
        store = world.store(retained=2)
        add(world, store, 1)
        store.shutdown(JobOutcome.FINISHED, discard=world.discard)
        assert ids(world.store().all()) == [1] and world.data_ids() == [1]
        with pytest.raises(StoreClosedError):
            add(world, store, 2)

    def test_shutdown_can_discard_everything_of_a_globally_terminal_job(
        self, world: StoreWorld
    ) -> None:
        store = world.store(retained=2, discard_on_terminal=True)
        for checkpoint_id in (1, 2):
            add(world, store, checkpoint_id)
        world.counter().set_count(10)
        store.shutdown(JobOutcome.FAILED, discard=world.discard)
        assert ids(world.store().all()) == [1, 2]
        world.store(retained=2, discard_on_terminal=True).shutdown(JobOutcome.CANCELED,
                                                                   discard=world.discard)
        assert world.store().all() == [] and world.data_ids() == []
        assert world.counter().get() == 10

    def test_ensure_configmap_creates_once_and_never_overwrites(self, world: StoreWorld) -> None:
        add(world, world.store(), 1)
        again = ensure_configmap(api=world.api, namespace=world.namespace, name=world.name,
                                 job_name=world.job_name, owner_reference=None)
        assert again is False
        assert ids(world.store().all()) == [1]

    def test_the_store_is_garbage_collected_with_its_owner(
        self, world: StoreWorld, kube_rest: Any
    ) -> None:
        owner = kube_rest.request(
            "POST", f"/api/v1/namespaces/{world.namespace}/configmaps",
            body={"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": f"{world.job_name}-owner"}})
        reference = {"apiVersion": "v1", "kind": "ConfigMap",
                     "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}
        name = f"{world.job_name}-owned-checkpoints"
        assert ensure_configmap(api=world.api, namespace=world.namespace, name=name,
                                job_name=world.job_name, owner_reference=reference)
        kube_rest.request("DELETE",
                          f"/api/v1/namespaces/{world.namespace}/configmaps/{reference['name']}")

        def gone() -> bool:
            try:
                read_snapshot(api=world.api, namespace=world.namespace, name=name)
            except StoreNotFoundError:
                return True
            return False

        wait_for(gone, what="the store to be garbage-collected", timeout=60)
