"""Pods reach the apiserver with their own service account, so RBAC applies to them."""

from __future__ import annotations

import textwrap

import pytest

from e2e.controlplane import ProcessNode, RestClient
from e2e.controlplane.manifests import python_pod
from e2e.controlplane.waiting import container_state, wait_for_pod_phase

# Lists ConfigMaps in its own namespace through KUBECONFIG, as an operator would,
# and exits 43 on 403 so the outcome is visible in the pod's status.
LIST_CONFIGMAPS = textwrap.dedent(
    """
    import os, sys
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException
    config.load_kube_config()
    ns = open(os.environ["CJOB_SERVICEACCOUNT_DIR"] + "/namespace").read()
    try:
        items = client.CoreV1Api().list_namespaced_config_map(ns).items
    except ApiException as exc:
        print("status", exc.status, flush=True)
        sys.exit(43 if exc.status == 403 else 1)
    print("listed", len(items), flush=True)
    """
)


def create_service_account(rest: RestClient, namespace: str, name: str) -> None:
    rest.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )


def grant_configmap_reader(rest: RestClient, namespace: str, service_account: str) -> None:
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    rest.request(
        "POST",
        f"{rbac}/roles",
        body={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "configmap-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
        },
    )
    rest.request(
        "POST",
        f"{rbac}/rolebindings",
        body={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "configmap-reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "configmap-reader",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}
            ],
        },
    )


def test_a_service_account_without_a_role_gets_403(
    kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
) -> None:
    create_service_account(kube_rest, kube_namespace, "nobody")
    pod = python_pod(name="denied", code=LIST_CONFIGMAPS, service_account="nobody")
    kube_rest.request("POST", f"/api/v1/namespaces/{kube_namespace}/pods", body=pod)

    done = wait_for_pod_phase(
        kube_rest, namespace=kube_namespace, name="denied", phases=("Succeeded", "Failed")
    )

    log = process_node.read_pod_log(namespace=kube_namespace, name="denied")
    assert container_state(done)["terminated"]["exitCode"] == 43, log
    assert "status 403" in log


def test_a_role_binding_grants_the_pod_access(
    kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
) -> None:
    create_service_account(kube_rest, kube_namespace, "reader")
    grant_configmap_reader(kube_rest, kube_namespace, "reader")
    pod = python_pod(name="allowed", code=LIST_CONFIGMAPS, service_account="reader")
    kube_rest.request("POST", f"/api/v1/namespaces/{kube_namespace}/pods", body=pod)

    done = wait_for_pod_phase(
        kube_rest, namespace=kube_namespace, name="allowed", phases=("Succeeded", "Failed")
    )

    log = process_node.read_pod_log(namespace=kube_namespace, name="allowed")
    assert done["status"]["phase"] == "Succeeded", log
    assert "listed" in log


def test_an_unknown_client_certificate_is_not_an_admin(
    kube_rest: RestClient, kube_namespace: str, control_plane: object
) -> None:
    from e2e.controlplane import ApiError, ControlPlane

    assert isinstance(control_plane, ControlPlane)
    pair = control_plane.issue_client_cert(name="stranger", user="stranger")
    stranger = RestClient(
        server=control_plane.server,
        ca_file=control_plane.ca_file,
        client_cert=pair.cert,
        client_key=pair.key,
    )

    with pytest.raises(ApiError) as denied:
        stranger.get(f"/api/v1/namespaces/{kube_namespace}/configmaps")

    assert denied.value.status == 403
