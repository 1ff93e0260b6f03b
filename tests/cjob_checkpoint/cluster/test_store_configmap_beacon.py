"""The driver beacon's records on a real API server, written with the driver's own Role.

The active driver records where its beacon listens on its checkpoint ConfigMap; a
standby reads it from the watch it holds for its promotion, and reports the driver lost
on the same ConfigMap, where the operator reads it with the store. Neither needs a
right the driver's Role did not already give.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cjob_operator.api import KubeCluster
from test_store_configmap_promotion import as_driver, new_store

from cjob_checkpoint.store.configmap_beacon import BeaconRecords, beacon_in
from cjob_checkpoint.store.configmap_promotion import ConfigMapPromotionWatch
from cjob_spec.driver_beacon import BEACON_ANNOTATION, BeaconAddress, DriverLost


def test_a_waiting_standby_reads_the_beacon_the_active_driver_recorded(
    control_plane: Any, kube_rest: Any, core_api: Any, store_namespace: str
) -> None:
    job_name, store = new_store(core_api, store_namespace, "beacon")
    pod = f"{job_name}-standby-1"
    api = as_driver(control_plane=control_plane, kube_rest=kube_rest,
                    namespace=store_namespace, job_name=job_name)
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


def test_a_standbys_report_reaches_the_operator_with_the_store(
    control_plane: Any, kube_rest: Any, kube_api_client: Any, core_api: Any,
    store_namespace: str
) -> None:
    job_name, store = new_store(core_api, store_namespace, "lost")
    api = as_driver(control_plane=control_plane, kube_rest=kube_rest,
                    namespace=store_namespace, job_name=job_name)
    operator = KubeCluster(api_client=kube_api_client)
    before = operator.read_store(namespace=store_namespace, name=store)
    assert before is not None and before.driver_lost is None
    report = DriverLost(attempt=1, pod=f"{job_name}-standby-1", at=1_700_000_000.0,
                        detail="its connection closed without a goodbye")
    BeaconRecords(api=api, namespace=store_namespace, store=store).report_lost(report)
    reading = operator.read_store(namespace=store_namespace, name=store)
    assert reading is not None and reading.driver_lost == report
    assert reading.fence_attempt == 1
