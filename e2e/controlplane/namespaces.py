"""Test namespaces: created with a label, usable once their service account exists."""

from __future__ import annotations

from e2e.controlplane.rest import ApiError, RestClient, quote
from e2e.controlplane.waiting import wait_for

TEST_LABEL = "checkpointed.io/test"


def resource_exists(client: RestClient, path: str) -> bool:
    """Whether ``GET path`` finds the object (404 is ``False``; other errors raise)."""
    try:
        client.get(path)
        return True
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise


def create_test_namespace(client: RestClient, name: str) -> None:
    client.request(
        "POST",
        "/api/v1/namespaces",
        body={
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {TEST_LABEL: "true"}},
        },
    )


def wait_for_default_service_account(client: RestClient, name: str) -> None:
    """Pods are refused until the service account controller made ``default``."""
    wait_for(
        lambda: resource_exists(client, f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        what=f"service account default in {name}",
        timeout=60,
    )


def delete_namespace(client: RestClient, name: str) -> None:
    """Delete ``name``; a namespace that is already gone is fine."""
    try:
        client.request("DELETE", f"/api/v1/namespaces/{quote(name)}")
    except ApiError as exc:
        if exc.status != 404:
            raise
