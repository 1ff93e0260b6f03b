"""What a container of a process-node pod starts with: its argv, environment and
working directory, built from the pod spec as the kubelet builds them.

That covers ``env`` (with ``$(VAR)`` references), ``envFrom`` and ``valueFrom``
(ConfigMap and Secret keys read from the apiserver, the downward API's fields), the
``KUBERNETES_SERVICE_*`` variables, a temporary directory of the pod's own, and a
pod-bound service account token laid out like the in-cluster mount, with a
kubeconfig beside it. The image is ignored: the host is the image, so a container
must set ``command``.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
from pathlib import Path
from typing import Any

from e2e.controlplane.container_run import ContainerRun
from e2e.controlplane.kubeconfig import write_kubeconfig
from e2e.controlplane.pod_host import PodHost
from e2e.controlplane.pod_status import POD_IP
from e2e.controlplane.rest import ApiError, quote

TOKEN_EXPIRATION_SECONDS = 24 * 3600
SERVICEACCOUNT_DIR_ENV = "CJOB_SERVICEACCOUNT_DIR"
POD_DIR_ENV = "CJOB_POD_DIR"
PASSTHROUGH_ENV = (
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "TZ",
    "USER",
    "JAVA_HOME",
    "SPARK_HOME",
    "PYTHONPATH",
    "CJOB_CACHE_DIR",
    # The test run's JVM start-up flags (the root conftest.py): a driver pod of this
    # node starts Spark as the tests' own drivers do. A real node's pods get only
    # what their image and spec say.
    "SPARK_SUBMIT_OPTS",
)


def expand_references(value: str, env: dict[str, str]) -> str:
    """Expand ``$(VAR)`` like the kubelet; ``$$(VAR)`` escapes to a literal ``$(VAR)``."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0).startswith("$$"):
            return match.group(0)[1:]
        name = match.group(1)
        return env.get(name, match.group(0))

    return re.sub(
        r"\$\$\([A-Za-z_][A-Za-z0-9_.-]*\)|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", replace, value
    )


class ContainerConfigError(RuntimeError):
    """A container cannot be configured yet (missing Secret/ConfigMap key, token...)."""

    def __init__(self, *, container: str, detail: str) -> None:
        self.container = container
        self.detail = detail
        super().__init__(f"container {container}: {detail}")


class PodLauncher:
    """Builds the launch of each container of one pod; reads the pod as passed in, so
    a change the apiserver reports (a label a ``fieldRef`` names) is seen."""

    def __init__(self, *, node: PodHost, namespace: str, pod_name: str, uid: str,
                 pod_dir: Path) -> None:
        self.node = node
        self.namespace = namespace
        self.pod_name = pod_name
        self.uid = uid
        self.pod_dir = pod_dir

    def _uses_service_account_token(self, pod: dict[str, Any]) -> bool:
        for volume in pod["spec"].get("volumes") or []:
            for source in (volume.get("projected") or {}).get("sources") or []:
                if "serviceAccountToken" in source:
                    return True
        return False

    def base_env(self, *, pod: dict[str, Any]) -> dict[str, str]:
        """Variables every container of the pod sees before its own ``env``."""
        node = self.node
        env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
        env.update(node.extra_env)
        env["PATH"] = os.pathsep.join([str(node.python_bin_dir), os.environ.get("PATH", "")])
        env["HOSTNAME"] = self.pod_name
        env["KUBERNETES_SERVICE_HOST"] = "127.0.0.1"
        env["KUBERNETES_SERVICE_PORT"] = str(node.control_plane.apiserver_port)
        env["KUBERNETES_SERVICE_PORT_HTTPS"] = str(node.control_plane.apiserver_port)
        env[POD_DIR_ENV] = str(self.pod_dir)
        tmp = self.pod_dir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(tmp)
        if self._uses_service_account_token(pod):
            sa_dir = self._write_service_account_files(pod)
            env[SERVICEACCOUNT_DIR_ENV] = str(sa_dir)
            env["KUBECONFIG"] = str(self.pod_dir / "kubeconfig")
        return env

    def _write_service_account_files(self, pod: dict[str, Any]) -> Path:
        """Request a pod-bound token and lay it out like the in-cluster mount."""
        sa = pod["spec"].get("serviceAccountName") or "default"
        answer = self.node.client.request(
            "POST",
            f"/api/v1/namespaces/{quote(self.namespace)}/serviceaccounts/{quote(sa)}/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "expirationSeconds": TOKEN_EXPIRATION_SECONDS,
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": self.pod_name,
                        "uid": self.uid,
                    },
                },
            },
        )
        token: str = answer["status"]["token"]
        sa_dir = self.pod_dir / "serviceaccount"
        sa_dir.mkdir(parents=True, exist_ok=True)
        (sa_dir / "token").write_text(token)
        (sa_dir / "namespace").write_text(self.namespace)
        shutil.copyfile(self.node.control_plane.ca_file, sa_dir / "ca.crt")
        write_kubeconfig(
            path=self.pod_dir / "kubeconfig",
            server=self.node.control_plane.server,
            ca_file=sa_dir / "ca.crt",
            user=f"system:serviceaccount:{self.namespace}:{sa}",
            token=token,
            token_file=sa_dir / "token",
            namespace=self.namespace,
        )
        return sa_dir

    def launch(
        self, run: ContainerRun, *, pod: dict[str, Any], base_env: dict[str, str] | None
    ) -> tuple[list[str], dict[str, str], str]:
        """The argv, environment and working directory ``run`` starts with."""
        spec = run.spec
        env = dict(base_env or {})
        for source in spec.get("envFrom") or []:
            env.update(self._env_from(source, run.name))
        for item in spec.get("env") or []:
            value = self._env_value(item, run.name, env, pod)
            if value is not None:
                env[item["name"]] = value
        command = list(spec.get("command") or [])
        args = list(spec.get("args") or [])
        if not command:
            raise ContainerConfigError(
                container=run.name,
                detail="no command: the process node ignores images, so set command",
            )
        argv = [expand_references(a, env) for a in command + args]
        cwd = spec.get("workingDir")
        if not cwd or not Path(cwd).is_dir():
            work = self.pod_dir / "work"
            work.mkdir(parents=True, exist_ok=True)
            cwd = str(work)
        return argv, env, cwd

    def _env_from(self, source: dict[str, Any], container: str) -> dict[str, str]:
        prefix = source.get("prefix", "")
        for kind, key in (("configmaps", "configMapRef"), ("secrets", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            data = self._read_object_data(kind, ref["name"], container, ref.get("optional"))
            return {prefix + k: v for k, v in (data or {}).items()}
        return {}

    def _env_value(
        self, item: dict[str, Any], container: str, env: dict[str, str], pod: dict[str, Any]
    ) -> str | None:
        if "value" in item:
            return expand_references(str(item["value"]), env)
        source = item.get("valueFrom")
        if source is None:
            return ""
        if "fieldRef" in source:
            return self._field_value(source["fieldRef"]["fieldPath"], container, pod)
        for kind, key in (("configmaps", "configMapKeyRef"), ("secrets", "secretKeyRef")):
            ref = source.get(key)
            if ref is None:
                continue
            optional = bool(ref.get("optional"))
            data = self._read_object_data(kind, ref["name"], container, optional)
            if data is None or ref["key"] not in data:
                if optional:
                    return None
                raise ContainerConfigError(
                    container=container,
                    detail=f"couldn't find key {ref['key']} in {kind[:-1]} "
                    f"{self.namespace}/{ref['name']}",
                )
            return data[ref["key"]]
        if "resourceFieldRef" in source:
            return "0"
        return ""

    def _field_value(self, path: str, container: str, pod: dict[str, Any]) -> str:
        meta = pod["metadata"]
        spec = pod["spec"]
        values: dict[str, str] = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "metadata.uid": meta["uid"],
            "spec.nodeName": spec.get("nodeName", ""),
            "spec.serviceAccountName": spec.get("serviceAccountName", ""),
            "status.podIP": POD_IP,
            "status.podIPs": POD_IP,
            "status.hostIP": POD_IP,
            "status.hostIPs": POD_IP,
        }
        if path in values:
            return values[path]
        match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if match:
            return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
        raise ContainerConfigError(container=container, detail=f"unsupported fieldPath {path}")

    def _read_object_data(
        self, kind: str, name: str, container: str, optional: bool | None
    ) -> dict[str, str] | None:
        try:
            obj = self.node.client.get(
                f"/api/v1/namespaces/{quote(self.namespace)}/{kind}/{quote(name)}"
            )
        except ApiError as exc:
            if exc.status == 404 and optional:
                return None
            raise ContainerConfigError(
                container=container, detail=f"{kind[:-1]} {self.namespace}/{name}: {exc.reason}"
            ) from None
        if kind == "secrets":
            return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        return dict(obj.get("data") or {})
