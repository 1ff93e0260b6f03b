"""What tests do to a cluster's Nodes through the API server, on any cluster the
harness starts (the local control plane with its process nodes, kind)."""

from __future__ import annotations

from e2e.controlplane.rest import RestClient, quote


def cordon(rest: RestClient, node: str, *, unschedulable: bool = True) -> None:
    """``kubectl cordon`` ``node`` (``uncordon`` with ``unschedulable=False``): new pods
    go to other nodes, or may come back to it."""
    rest.request("PATCH", f"/api/v1/nodes/{quote(node)}",
                 body={"spec": {"unschedulable": unschedulable}},
                 content_type="application/merge-patch+json")
