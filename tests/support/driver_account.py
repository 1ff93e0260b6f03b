"""A Kubernetes client authenticated as a job's driver, with the operator's own Role.

The Role, RoleBinding and ServiceAccount come from ``cjob_operator.builders``, so the
tests that use this client check the contract between the operator's least-privilege
Role and what the driver does with its store.
"""

from __future__ import annotations

from typing import Any

from cjob_operator.builders import build_role, build_role_binding, build_service_account
from kubernetes import client as k8s_client

from cjob_checkpoint.store.configmap import configure_for_store
from cjob_spec import parse_job


def job_document(*, name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "checkpointed.io/v1alpha1",
        "kind": "CheckpointedJob",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                     "generation": 1},
        "spec": {
            "image": "example.org/clicks:1.0",
            "job": {"entrypoint": "clicks.job:build"},
            "parallelism": 2,
            "spark": {"master": "k8s", "executor": {"instances": 2}},
            "checkpoint": {"storage": "file:///data/ckpt"},
        },
    }


def without_owner(manifest: dict[str, Any]) -> dict[str, Any]:
    """The test has no CheckpointedJob to own these; an owner that does not exist
    would make the garbage collector delete them."""
    manifest["metadata"].pop("ownerReferences", None)
    return manifest


def driver_api(*, control_plane: Any, kube_rest: Any, namespace: str, job_name: str) -> Any:
    """A ``CoreV1Api`` authenticated as the job's driver service account."""
    job = parse_job(job_document(name=job_name, namespace=namespace))
    account = without_owner(build_service_account(job))
    role = without_owner(build_role(job))
    binding = without_owner(build_role_binding(job))
    kube_rest.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body=account)
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    kube_rest.request("POST", f"{rbac}/roles", body=role)
    kube_rest.request("POST", f"{rbac}/rolebindings", body=binding)
    answer = kube_rest.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account['metadata']['name']}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"expirationSeconds": 600}})
    configuration = k8s_client.Configuration()
    configuration.host = control_plane.server
    configuration.ssl_ca_cert = str(control_plane.ca_file)
    configuration.api_key = {"authorization": answer["status"]["token"]}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    configure_for_store(configuration)
    return k8s_client.CoreV1Api(k8s_client.ApiClient(configuration))
