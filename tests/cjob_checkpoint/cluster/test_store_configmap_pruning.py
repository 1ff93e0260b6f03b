"""Pruning after a committed pointer, against the real kube-apiserver.

Once ``add_checkpoint_and_subsume_oldest`` committed the new pointer, that
checkpoint is the job's newest restorable one. Whatever the apiserver answers
to the pruning writes that follow (403 after an RBAC change, 404 after the
ConfigMap vanished, 422 from admission), the add must not report a failure:
the caller would discard the data the committed pointer names. The failure is
logged, counted and pruning is retried by the next add.
"""

from __future__ import annotations

import pytest
from store_configmap_support import LossyApiProxy, StoreWorld

from cjob_checkpoint.store.completed_store import CompletedCheckpoint
from cjob_checkpoint.store.configmap import ConfigMapCheckpointStore


def ids(checkpoints: list[CompletedCheckpoint]) -> list[int]:
    return [c.checkpoint_id for c in checkpoints]


def add(world: StoreWorld, store: ConfigMapCheckpointStore, checkpoint_id: int) -> list[int]:
    return ids(store.add_checkpoint_and_subsume_oldest(world.write_checkpoint(checkpoint_id),
                                                       discard=world.discard))


class TestAPruningWriteRefusedAfterTheCommit:
    @pytest.mark.parametrize("status", [403, 404, 422])
    def test_the_add_succeeds_and_the_new_checkpoint_stands(
            self, world: StoreWorld, lossy_proxy: LossyApiProxy, status: int) -> None:
        store = world.store(retained=1, api=lossy_proxy.api(), max_attempts=2,
                            request_timeout=(2.0, 10.0))
        add(world, store, 1)
        lossy_proxy.refuse_answers(method="PUT", status=status, after=1)

        assert add(world, store, 2) == []

        latest = world.store().latest()
        assert latest is not None and latest.checkpoint_id == 2
        assert ids(world.store().all()) == [1, 2]   # 1 is pruned by the next add
        assert world.data_ids() == [1, 2]
        assert store.prune_failures == 1

    def test_the_next_add_prunes_what_was_left(self, world: StoreWorld,
                                               lossy_proxy: LossyApiProxy) -> None:
        store = world.store(retained=1, api=lossy_proxy.api(), max_attempts=2,
                            request_timeout=(2.0, 10.0))
        add(world, store, 1)
        lossy_proxy.refuse_answers(method="PUT", status=403, after=1)
        add(world, store, 2)

        assert add(world, store, 3) == [1, 2]
        assert ids(world.store().all()) == [3]
        assert world.data_ids() == [3]
