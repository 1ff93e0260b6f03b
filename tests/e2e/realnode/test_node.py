"""The real node gives pods what a user's cluster gives them: their own IP and
root filesystem, cluster DNS, Services, the apiserver through the ``kubernetes``
Service with a projected token, and mounted volumes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from e2e.controlplane.rest import RestClient, quote
from e2e.controlplane.waiting import container_state, create_objects, wait_for, wait_for_pod_phase
from e2e.realnode.pytest_plugin import RealCluster

PROBE = textwrap.dedent(
    """
    import json, os, socket, ssl, time, urllib.request

    def patiently(call):
        # A Service answers once kube-proxy and CoreDNS saw its endpoints, a moment
        # after the backing pod turned Ready: retry as any client would.
        deadline = time.monotonic() + 30
        while True:
            try:
                return call()
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    report = {}
    report["ip"] = socket.gethostbyname(socket.gethostname())
    report["kubernetes"] = socket.gethostbyname("kubernetes.default.svc.cluster.local")
    report["headless"] = patiently(lambda: socket.gethostbyname("web-headless"))
    report["service_body"] = patiently(
        lambda: urllib.request.urlopen("http://web:8080/token", timeout=10).read().decode()
    )
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
    req = urllib.request.Request(
        "https://kubernetes.default.svc/api",
        headers={"Authorization": "Bearer " + open(f"{sa}/token").read()},
    )
    report["api_kind"] = json.load(urllib.request.urlopen(req, context=ctx, timeout=10))["kind"]
    report["secret"] = open("/mnt/secret/word").read()
    report["host_file"] = open("/mnt/host/from-host.txt").read()
    open("/mnt/host/from-pod.txt", "w").write("written by the pod")
    open("/mnt/claim/from-pod.txt", "w").write("on the claim")
    open("/mnt/scratch/x", "w").write("scratch")
    report["image_file"] = os.path.exists("/opt/cjob/entrypoint.sh")
    report["uid"] = os.getuid()
    print("REPORT " + json.dumps(report), flush=True)
    """
)

SERVER = textwrap.dedent(
    """
    import http.server, os
    os.makedirs("/tmp/www", exist_ok=True)
    open("/tmp/www/token", "w").write("served by " + os.environ["HOSTNAME"])
    os.chdir("/tmp/www")
    http.server.ThreadingHTTPServer(("", 8080), http.server.SimpleHTTPRequestHandler).serve_forever()
    """
)


def _pod(name: str, image: str, code: str, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Never",
        "args": ["python", "-c", code],
    }
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": spec.pop("labels", {})},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


def _ready_pod(rest: RestClient, *, namespace: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = rest.get(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}")
    conditions = pod["status"].get("conditions", [])
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return pod if ready else None


def _logs(rest: RestClient, *, namespace: str, name: str) -> str:
    return rest.get_text(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/log")


def test_a_pod_has_its_own_network_dns_services_token_and_volumes(
    real_cluster: RealCluster, real_namespace: str, tmp_path: Path
) -> None:
    rest = real_cluster.rest()
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    (host_dir / "from-host.txt").write_text("written by the host")
    host_dir.chmod(0o777)
    claim_dir = tmp_path / "claim"
    claim_dir.mkdir()
    claim_dir.chmod(0o777)
    pv_name = f"{real_namespace}-pv"
    rest.request(
        "POST",
        "/api/v1/persistentvolumes",
        body={
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": str(claim_dir)},
                "claimRef": {"namespace": real_namespace, "name": "claim"},
            },
        },
    )
    try:
        create_objects(
            rest,
            namespace=real_namespace,
            objects=[
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "claim"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": "",
                        "volumeName": pv_name,
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                },
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "words"},
                    "stringData": {"word": "projected"},
                },
                _pod(
                    "web",
                    real_cluster.runtime_image,
                    SERVER,
                    labels={"app": "web"},
                    container={"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}},
                ),
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": "web"},
                    "spec": {"selector": {"app": "web"}, "ports": [{"port": 8080}]},
                },
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": "web-headless"},
                    "spec": {
                        "clusterIP": "None",
                        "selector": {"app": "web"},
                        "ports": [{"port": 8080}],
                    },
                },
            ],
        )
        web = wait_for(
            lambda: _ready_pod(rest, namespace=real_namespace, name="web"),
            what="web ready",
            timeout=120,
        )
        create_objects(
            rest,
            namespace=real_namespace,
            objects=[
                _pod(
                    "probe",
                    real_cluster.runtime_image,
                    PROBE,
                    container={
                        "volumeMounts": [
                            {"name": "secret", "mountPath": "/mnt/secret"},
                            {"name": "host", "mountPath": "/mnt/host"},
                            {"name": "claim", "mountPath": "/mnt/claim"},
                            {"name": "scratch", "mountPath": "/mnt/scratch"},
                        ]
                    },
                    volumes=[
                        {"name": "secret", "secret": {"secretName": "words"}},
                        {"name": "host", "hostPath": {"path": str(host_dir)}},
                        {"name": "claim", "persistentVolumeClaim": {"claimName": "claim"}},
                        {"name": "scratch", "emptyDir": {}},
                    ],
                )
            ],
        )
        done = wait_for_pod_phase(
            rest,
            namespace=real_namespace,
            name="probe",
            phases=("Succeeded", "Failed"),
            timeout=120,
        )
        logs = _logs(rest, namespace=real_namespace, name="probe")
        assert container_state(done)["terminated"]["exitCode"] == 0, logs
        report = json.loads(logs.split("REPORT ", 1)[1])

        web_ip = web["status"]["podIP"]
        assert report["ip"] == done["status"]["podIP"]
        assert report["ip"].startswith("10.244.0.") and report["ip"] != web_ip
        assert report["kubernetes"] == "10.96.0.1"
        assert report["headless"] == web_ip
        assert report["service_body"] == "served by web"
        assert report["api_kind"] == "APIVersions"
        assert report["secret"] == "projected"
        assert report["host_file"] == "written by the host"
        assert (host_dir / "from-pod.txt").read_text() == "written by the pod"
        assert (claim_dir / "from-pod.txt").read_text() == "on the claim"
        assert report["image_file"] is True
        assert report["uid"] == 185
    finally:
        rest.request("DELETE", f"/api/v1/persistentvolumes/{pv_name}")


def test_a_deleted_pod_is_gone_without_waiting_for_its_grace_period(
    real_cluster: RealCluster, real_namespace: str
) -> None:
    rest = real_cluster.rest()
    create_objects(
        rest,
        namespace=real_namespace,
        objects=[_pod("sleeper", real_cluster.runtime_image, "import time; time.sleep(600)")],
    )
    wait_for_pod_phase(
        rest, namespace=real_namespace, name="sleeper", phases=("Running",), timeout=120
    )
    path = f"/api/v1/namespaces/{quote(real_namespace)}/pods/sleeper"
    rest.request("DELETE", path, body={"gracePeriodSeconds": 30})

    def gone() -> bool:
        try:
            rest.get(path)
        except Exception:
            return True
        return False

    # tini forwards SIGTERM, Python dies of it, the sandbox's pause exits at once:
    # well inside the 30 s grace period.
    wait_for(gone, what="pod deleted", timeout=20)
