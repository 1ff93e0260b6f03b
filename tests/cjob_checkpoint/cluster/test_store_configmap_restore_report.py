"""The driver's restore report in the ConfigMap store, against a real kube-apiserver.

The report is the annotation ``checkpointed.io/restored`` on ``<job>-checkpoints``,
written with the same compare-and-swap and fence as the pointers, so a zombie of an
older attempt cannot overwrite what the current attempt restored.
"""

from __future__ import annotations

import json

import pytest
from store_configmap_support import StoreWorld

from cjob_checkpoint.store.completed_store import FencedError
from cjob_checkpoint.store.configmap import read_snapshot
from cjob_checkpoint.store.configmap_layout import ANNOTATION_RESTORED
from cjob_checkpoint.store.restore_report import RestoredCheckpoint, RestoreReport


def fell_back(world: StoreWorld, *, attempt: int) -> RestoreReport:
    return RestoreReport(
        attempt=attempt,
        checkpoint=RestoredCheckpoint(id=1, path=world.storage.metadata_uri(1)),
        fallback_from=RestoredCheckpoint(id=2, path=world.storage.metadata_uri(2)),
    )


def test_the_restore_report_is_an_annotation_the_operator_reads_back(world: StoreWorld) -> None:
    store = world.store(attempt=1)
    store.add_checkpoint_and_subsume_oldest(world.write_checkpoint(1), discard=world.discard)
    report = fell_back(world, attempt=1)
    assert store.record_restore(report)

    annotation = world.raw()["metadata"]["annotations"][ANNOTATION_RESTORED]
    assert json.loads(annotation)["version"] == 1
    assert len(annotation.encode()) < 2048
    snapshot = read_snapshot(api=world.api, namespace=world.namespace, name=world.name)
    assert snapshot.restore_report == report
    assert [c.checkpoint_id for c in snapshot.checkpoints] == [1]
    assert store.restore_report() == report


def test_a_fenced_attempt_cannot_overwrite_the_report_of_the_current_one(
        world: StoreWorld) -> None:
    world.advance(2)
    current = world.store(attempt=2)
    current.record_restore(fell_back(world, attempt=2))
    zombie = world.store(attempt=1)
    with pytest.raises(FencedError):
        zombie.record_restore(RestoreReport(attempt=1, checkpoint=None, fallback_from=None))
    snapshot = read_snapshot(api=world.api, namespace=world.namespace, name=world.name)
    assert snapshot.restore_report == fell_back(world, attempt=2)


def test_recording_the_report_keeps_the_checkpoints_committed_around_it(
        world: StoreWorld) -> None:
    store = world.store(attempt=1)
    store.add_checkpoint_and_subsume_oldest(world.write_checkpoint(1), discard=world.discard)
    store.record_restore(RestoreReport(attempt=1, checkpoint=None, fallback_from=None))
    store.add_checkpoint_and_subsume_oldest(world.write_checkpoint(2), discard=world.discard)
    snapshot = read_snapshot(api=world.api, namespace=world.namespace, name=world.name)
    assert [c.checkpoint_id for c in snapshot.checkpoints] == [1, 2]
    assert snapshot.restore_report == RestoreReport(attempt=1, checkpoint=None,
                                                    fallback_from=None)


def test_a_store_without_a_report_reads_as_none(world: StoreWorld) -> None:
    snapshot = read_snapshot(api=world.api, namespace=world.namespace, name=world.name)
    assert snapshot.restore_report is None
    assert world.store(attempt=1).restore_report() is None
