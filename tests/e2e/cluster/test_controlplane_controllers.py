"""The real scheduler and controller-manager act on objects created through the API."""

from __future__ import annotations

from e2e.controlplane import ProcessNode, RestClient
from e2e.controlplane.rest import ApiError
from e2e.controlplane.waiting import wait_for


def test_a_deployment_gets_its_pod_run_on_the_process_node(
    kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
) -> None:
    ns = kube_namespace
    labels = {"app": "web"}
    kube_rest.request(
        "POST",
        f"/apis/apps/v1/namespaces/{ns}/deployments",
        body={
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"type": "process"},
                        "containers": [
                            {
                                "name": "web",
                                "image": "checkpointed-jobs/test:latest",
                                "command": [
                                    "python", "-c",
                                    "import time\nprint('serving', flush=True)\n"
                                    "while True: time.sleep(1)",
                                ],
                            }
                        ],
                    },
                },
            },
        },
    )  # fmt: skip

    def available() -> dict[str, object] | None:
        dep = kube_rest.get(f"/apis/apps/v1/namespaces/{ns}/deployments/web")
        return dep if dep.get("status", {}).get("availableReplicas") == 1 else None

    wait_for(available, what="deployment web available", timeout=120)
    pods = kube_rest.get(f"/api/v1/namespaces/{ns}/pods", query={"labelSelector": "app=web"})
    [pod] = pods["items"]
    assert pod["spec"]["nodeName"] == process_node.name
    assert pod["status"]["phase"] == "Running"
    name = pod["metadata"]["name"]
    wait_for(
        lambda: "serving" in process_node.read_pod_log(namespace=ns, name=name),
        what="the deployment's process to write its log",
    )


def _configmap(name: str, owner: dict[str, str] | None = None) -> dict[str, object]:
    meta: dict[str, object] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": owner["name"], "uid": owner["uid"]}
        ]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def test_garbage_collection_deletes_the_children_of_a_deleted_owner(
    kube_rest: RestClient, kube_namespace: str
) -> None:
    base = f"/api/v1/namespaces/{kube_namespace}/configmaps"
    owner = kube_rest.request("POST", base, body=_configmap("owner"))
    kube_rest.request("POST", base, body=_configmap("child", owner["metadata"]))
    kube_rest.request("POST", base, body=_configmap("bystander"))

    kube_rest.request(
        "DELETE",
        f"{base}/owner",
        body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"},
    )

    def child_gone() -> bool:
        try:
            kube_rest.get(f"{base}/child")
            return False
        except ApiError as exc:
            return exc.status == 404

    wait_for(child_gone, what="the garbage collector to delete the child", timeout=120)
    assert kube_rest.get(f"{base}/bystander")["metadata"]["name"] == "bystander"
