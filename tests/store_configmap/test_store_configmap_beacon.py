"""The driver beacon's records on a real API server, written with the driver's own Role.

The active driver records where its beacon listens on its checkpoint ConfigMap; a
standby reads it from the watch it holds for its promotion, and reports the driver lost
on its own pod, which is the one pod its attempt's Role lets it patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes import client as k8s_client
from test_store_configmap_promotion import as_driver, new_store, standby_pod

from cjob_checkpoint.store.configmap_beacon import BeaconRecords, beacon_in
from cjob_checkpoint.store.configmap_promotion import ConfigMapPromotionWatch
from cjob_spec.driver_beacon import (
    BEACON_ANNOTATION,
    DRIVER_LOST_ANNOTATION,
    BeaconAddress,
    DriverLost,
)

pytestmark = pytest.mark.cluster


def test_a_waiting_standby_reads_the_beacon_the_active_driver_recorded(
    control_plane: Any, kube_rest: Any, core_api: Any, store_namespace: str
) -> None:
    job_name, store = new_store(core_api, store_namespace, "beacon")
    pod = f"{job_name}-standby-1"
    api = as_driver(control_plane=control_plane, kube_rest=kube_rest,
                    namespace=store_namespace, job_name=job_name, standby_pod=pod)
    address = BeaconAddress(attempt=1, host="10.1.2.3", port=40001)
    BeaconRecords(api=api, namespace=store_namespace, store=store).publish(address)
    seen: list[BeaconAddress | None] = []

    def on_annotations(annotations: Mapping[str, str]) -> None:
        seen.append(beacon_in(annotations))

    watch = ConfigMapPromotionWatch(api=api, namespace=store_namespace, name=store, pod=pod,
                                    min_attempt=2, on_annotations=on_annotations)
    assert watch.wait(seconds=2) is None  # no promotion: only the beacon
    assert seen and seen[0] == address
    # The patch touched the beacon's annotation alone: the store's fence is as it was.
    annotations = core_api.read_namespaced_config_map(store, store_namespace).metadata.annotations
    assert annotations["checkpointed.io/fence-attempt"] == "1"
    assert BeaconAddress.decode(annotations[BEACON_ANNOTATION]) == address


def test_a_standby_may_report_on_its_own_pod_and_on_no_other(
    control_plane: Any, kube_rest: Any, core_api: Any, store_namespace: str
) -> None:
    job_name, store = new_store(core_api, store_namespace, "lost")
    own, other = f"{job_name}-standby-1", f"{job_name}-attempt-1"
    standby_pod(core_api, store_namespace, own)
    standby_pod(core_api, store_namespace, other)
    api = as_driver(control_plane=control_plane, kube_rest=kube_rest,
                    namespace=store_namespace, job_name=job_name, standby_pod=own)
    records = BeaconRecords(api=api, namespace=store_namespace, store=store)
    report = DriverLost(attempt=1, at=1_700_000_000.0, detail="its connection closed")
    records.report_lost(pod=own, report=report)
    annotations = core_api.read_namespaced_pod(own, store_namespace).metadata.annotations
    assert DriverLost.decode(annotations[DRIVER_LOST_ANNOTATION]) == report
    with pytest.raises(k8s_client.ApiException) as refused:
        records.report_lost(pod=other, report=report)
    assert refused.value.status == 403
    # Without a standby in its attempt's Role, no pod at all.
    plain, _ = new_store(core_api, store_namespace, "plain")
    standby_pod(core_api, store_namespace, f"{plain}-standby-1")
    plain_api = as_driver(control_plane=control_plane, kube_rest=kube_rest,
                          namespace=store_namespace, job_name=plain)
    with pytest.raises(k8s_client.ApiException) as refused:
        BeaconRecords(api=plain_api, namespace=store_namespace,
                      store=f"{plain}-checkpoints").report_lost(pod=f"{plain}-standby-1",
                                                                report=report)
    assert refused.value.status == 403
