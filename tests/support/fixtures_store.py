"""Fixtures for the ConfigMap store against the local control plane (see the support module)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s_client
from store_configmap_support import LossyApiProxy, StoreWorld

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.store.configmap import ensure_configmap


@pytest.fixture
def lossy_proxy(control_plane: Any) -> Iterator[LossyApiProxy]:
    pair = control_plane.issue_client_cert(name="store-proxy", user="store-proxy",
                                           groups=("system:masters",))
    proxy = LossyApiProxy(upstream=control_plane.server, ca_file=control_plane.ca_file,
                          client_cert=pair.cert, client_key=pair.key)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def store_namespace(kube_rest: Any) -> Iterator[str]:
    """One namespace per module; each test uses its own job name in it."""
    name = f"t-store-{secrets.token_hex(3)}"
    kube_rest.request("POST", "/api/v1/namespaces",
                      body={"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": name,
                                         "labels": {"checkpointed.io/test": "true"}}})
    try:
        yield name
    finally:
        kube_rest.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture(scope="module")
def core_api(kube_api_client: Any) -> Any:
    return k8s_client.CoreV1Api(kube_api_client)


@pytest.fixture
def world(core_api: Any, store_namespace: str, tmp_path: Path) -> StoreWorld:
    job_name = f"job-{secrets.token_hex(4)}"
    created = ensure_configmap(api=core_api, namespace=store_namespace,
                               name=f"{job_name}-checkpoints", job_name=job_name,
                               owner_reference=None)
    assert created
    world = StoreWorld(api=core_api, namespace=store_namespace, job_name=job_name,
                       storage=CheckpointStorage(f"file://{tmp_path}/ckpt", f"{job_name}-uid1"))
    world.advance(1)
    return world
