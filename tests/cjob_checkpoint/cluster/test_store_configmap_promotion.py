"""A standby driver hears of its promotion through its job's store, and only of its own.

The operator's own code writes the promotion (``KubeCluster.promote_standby``) and the
standby watches with the driver's own Role, on a real API server: the watch narrowed
to one ConfigMap by name is what that Role allows, and nothing more.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

import pytest
from cjob_operator.api import KubeCluster
from driver_account import driver_api
from kubernetes import client as k8s_client

from cjob_checkpoint.store.configmap import advance_attempt, ensure_configmap
from cjob_checkpoint.store.configmap_promotion import (
    ConfigMapPromotionWatch,
    PromotionRefusedError,
)
from cjob_spec.standby_signal import PROMOTION_ANNOTATION, StandbyPromotion
from e2e.controlplane.waiting import wait_for


def new_store(core_api: Any, namespace: str, prefix: str) -> tuple[str, str]:
    job_name = f"{prefix}-{secrets.token_hex(3)}"
    store = f"{job_name}-checkpoints"
    ensure_configmap(api=core_api, namespace=namespace, name=store, job_name=job_name,
                     owner_reference=None)
    advance_attempt(api=core_api, namespace=namespace, name=store, attempt=1)
    return job_name, store


def standby_pod(core_api: Any, namespace: str, name: str) -> None:
    """The pod object the operator relabels; no node needs to run it for that."""
    core_api.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"checkpointed.io/role": "standby",
                                              "checkpointed.io/attempt": "1"}},
        "spec": {"containers": [{"name": "driver", "image": "example.org/runtime:1"}]},
    })


def as_driver(*, control_plane: Any, kube_rest: Any, namespace: str, job_name: str) -> Any:
    """The driver's client, once its new Role is in effect (RBAC caches take a moment)."""
    api = driver_api(control_plane=control_plane, kube_rest=kube_rest, namespace=namespace,
                     job_name=job_name)

    def effective() -> bool:
        try:
            api.read_namespaced_config_map(f"{job_name}-checkpoints", namespace)
        except k8s_client.ApiException as exc:
            if exc.status == 403:
                return False
            raise
        return True

    wait_for(effective, what="the driver's Role to take effect", timeout=30)
    return api


def annotate(core_api: Any, namespace: str, store: str, promotion: StandbyPromotion) -> None:
    core_api.patch_namespaced_config_map(
        store, namespace, {"metadata": {"annotations": {PROMOTION_ANNOTATION: promotion.encode()}}})


def test_a_standby_sees_its_own_promotion_and_ignores_others_and_older_attempts(
    control_plane: Any, kube_rest: Any, kube_api_client: Any, core_api: Any,
    store_namespace: str
) -> None:
    job_name, store = new_store(core_api, store_namespace, "promo")
    pod = f"{job_name}-standby-1"
    standby_pod(core_api, store_namespace, pod)
    api = as_driver(control_plane=control_plane, kube_rest=kube_rest,
                     namespace=store_namespace, job_name=job_name)
    watch = ConfigMapPromotionWatch(api=api, namespace=store_namespace, name=store, pod=pod,
                                    min_attempt=2)
    # Written before the watch starts: another standby's, and this one's for an attempt
    # older than it may take. Neither is this standby's promotion.
    annotate(core_api, store_namespace, store,
             StandbyPromotion(attempt=2, restore="latest", pod=f"{job_name}-standby-0"))
    assert watch.wait(seconds=2) is None
    annotate(core_api, store_namespace, store,
             StandbyPromotion(attempt=1, restore="latest", pod=pod))
    assert watch.wait(seconds=2) is None

    heard: list[StandbyPromotion | None] = []
    waiter = threading.Thread(target=lambda: heard.append(watch.wait(seconds=30)))
    waiter.start()
    operator = KubeCluster(api_client=kube_api_client)
    promotion = StandbyPromotion(attempt=2, restore="id:4", pod=pod)
    operator.promote_standby(namespace=store_namespace, store=store, promotion=promotion,
                             role="driver")
    waiter.join(timeout=60)
    assert heard == [promotion]
    labels = core_api.read_namespaced_pod(pod, store_namespace).metadata.labels
    assert (labels["checkpointed.io/role"], labels["checkpointed.io/attempt"]) == ("driver", "2")
    # A promotion written before the watch is seen by the next watch, too.
    assert watch.wait(seconds=2) == promotion


def test_a_standby_that_may_not_watch_the_store_stops_with_a_sentence_naming_it(
    control_plane: Any, kube_rest: Any, core_api: Any, store_namespace: str
) -> None:
    mine, _ = new_store(core_api, store_namespace, "mine")
    _, theirs = new_store(core_api, store_namespace, "theirs")
    api = as_driver(control_plane=control_plane, kube_rest=kube_rest,
                     namespace=store_namespace, job_name=mine)
    watch = ConfigMapPromotionWatch(api=api, namespace=store_namespace, name=theirs,
                                    pod=f"{mine}-standby-1", min_attempt=2)
    with pytest.raises(PromotionRefusedError, match=f"configmap:{store_namespace}/{theirs}"
                                                    r".*403") as refused:
        watch.wait(seconds=5)
    assert refused.value.status == 403


def test_an_unreadable_promotion_naming_this_standby_is_an_error_not_a_guess(
    control_plane: Any, kube_rest: Any, core_api: Any, store_namespace: str
) -> None:
    job_name, store = new_store(core_api, store_namespace, "bad")
    pod = f"{job_name}-standby-1"
    core_api.patch_namespaced_config_map(store, store_namespace, {"metadata": {"annotations": {
        PROMOTION_ANNOTATION: f'{{"version": 9, "attempt": 2, "pod": "{pod}"}}'}}})
    api = as_driver(control_plane=control_plane, kube_rest=kube_rest,
                     namespace=store_namespace, job_name=job_name)
    watch = ConfigMapPromotionWatch(api=api, namespace=store_namespace, name=store, pod=pod,
                                    min_attempt=2)
    with pytest.raises(ValueError, match="format version 9"):
        watch.wait(seconds=5)
