"""A driver's service account can use its own job's store and nobody else's.

The Role, RoleBinding and ServiceAccount are the operator's own (from
``cjob_operator.builders``), so this checks the contract between the operator's
least-privilege Role and what the store needs: get and update of one ConfigMap.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from driver_account import driver_api
from kubernetes import client as k8s_client

from cjob_checkpoint.store.completed_store import CompletedCheckpoint
from cjob_checkpoint.store.configmap import (
    ConfigMapCheckpointIdCounter,
    ConfigMapCheckpointStore,
    StoreAccessDeniedError,
    advance_attempt,
    ensure_configmap,
)
from e2e.controlplane.waiting import wait_for


def test_a_driver_uses_its_own_jobs_store_and_is_refused_another_jobs_store(
    control_plane: Any, kube_rest: Any, core_api: Any, store_namespace: str
) -> None:
    mine, theirs = f"mine-{secrets.token_hex(3)}", f"theirs-{secrets.token_hex(3)}"
    for job_name in (mine, theirs):
        name = f"{job_name}-checkpoints"
        ensure_configmap(api=core_api, namespace=store_namespace, name=name, job_name=job_name,
                         owner_reference=None)
        advance_attempt(api=core_api, namespace=store_namespace, name=name, attempt=1)
    api = driver_api(control_plane=control_plane, kube_rest=kube_rest,
                     namespace=store_namespace, job_name=mine)
    own = ConfigMapCheckpointStore(api=api, namespace=store_namespace, name=f"{mine}-checkpoints",
                                   retained=1, attempt=1)

    def role_is_effective() -> bool:
        try:
            own.latest()
        except StoreAccessDeniedError:
            return False
        return True

    wait_for(role_is_effective, what="the driver's Role to take effect", timeout=30)
    counter = ConfigMapCheckpointIdCounter(api=api, namespace=store_namespace,
                                           name=f"{mine}-checkpoints", attempt=1)
    discarded: list[int] = []
    for _ in range(2):
        checkpoint_id = counter.get_and_increment()
        own.add_checkpoint_and_subsume_oldest(
            CompletedCheckpoint(checkpoint_id=checkpoint_id, timestamp=1.0,
                                metadata_path=f"file:///data/ckpt/{mine}-uid/chk-{checkpoint_id}"
                                              f"/_metadata"),
            discard=lambda c: discarded.append(c.checkpoint_id))
    assert [c.checkpoint_id for c in own.all()] == [2] and discarded == [1]

    other = ConfigMapCheckpointStore(api=api, namespace=store_namespace,
                                     name=f"{theirs}-checkpoints", retained=1, attempt=1)
    with pytest.raises(StoreAccessDeniedError, match="HTTP 403") as denied:
        other.latest()
    assert "check the driver's service account and Role" in str(denied.value)
    with pytest.raises(StoreAccessDeniedError, match="HTTP 403"):
        ConfigMapCheckpointIdCounter(api=api, namespace=store_namespace,
                                     name=f"{theirs}-checkpoints", attempt=1).get_and_increment()
    with pytest.raises(StoreAccessDeniedError, match="HTTP 403"):
        advance_attempt(api=api, namespace=store_namespace, name=f"{theirs}-checkpoints",
                        attempt=2)


def test_a_kubernetes_driver_may_not_create_list_or_delete_other_configmaps(
    control_plane: Any, kube_rest: Any, core_api: Any, store_namespace: str
) -> None:
    """Spark's executor ConfigMap is switched off, so the driver needs no ConfigMap
    rights besides its own store's: another job's settings stay out of its reach."""
    mine = f"mine-{secrets.token_hex(3)}"
    bystander = f"bystander-{secrets.token_hex(3)}"
    core_api.create_namespaced_config_map(store_namespace, {"metadata": {"name": bystander}})
    ensure_configmap(api=core_api, namespace=store_namespace, name=f"{mine}-checkpoints",
                     job_name=mine, owner_reference=None)
    api = driver_api(control_plane=control_plane, kube_rest=kube_rest,
                     namespace=store_namespace, job_name=mine)
    wait_for(lambda: _allowed(lambda: api.read_namespaced_config_map(
        f"{mine}-checkpoints", store_namespace)), what="the driver's Role to take effect",
        timeout=30)
    attempts = {
        "create": lambda: api.create_namespaced_config_map(
            store_namespace, {"metadata": {"name": f"{mine}-extra"}}),
        "list": lambda: api.list_namespaced_config_map(store_namespace),
        "delete": lambda: api.delete_namespaced_config_map(bystander, store_namespace),
        "deletecollection": lambda: api.delete_collection_namespaced_config_map(
            store_namespace, label_selector="spark-role=executor"),
    }
    allowed = [verb for verb, attempt in attempts.items() if _allowed(attempt)]
    assert allowed == []
    assert core_api.read_namespaced_config_map(bystander, store_namespace)


def _allowed(call: Any) -> bool:
    try:
        call()
    except k8s_client.ApiException as exc:
        if exc.status == 403:
            return False
        raise
    return True
