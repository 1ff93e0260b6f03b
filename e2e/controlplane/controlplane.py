"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-scheduler
and kube-controller-manager, started from the binaries that ``build.sh`` makes.

Nothing is faked: RBAC, admission, the scheduler, garbage collection and the
workload controllers are the real ones. Only kubelets are missing; the process node
(``process_node.py``) and kwok (``kwok.py``) stand in for them.
"""

from __future__ import annotations

import json
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from e2e.controlplane.audit import write_audit_policy
from e2e.controlplane.binaries import CONTROL_PLANE_BINARIES, ensure_binaries
from e2e.controlplane.kubeconfig import write_kubeconfig
from e2e.controlplane.pki import ClusterPki, KeyPair, build_cluster_pki, issue_cert
from e2e.controlplane.procs import Component, free_port
from e2e.controlplane.rest import RestClient

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
#: The ``kubernetes`` Service's address: the first of the service range.
KUBERNETES_SERVICE_IP = "10.96.0.1"


class ControlPlaneNotReadyError(RuntimeError):
    """Raised when a component does not become ready in time."""

    def __init__(self, *, what: str, timeout: float, detail: str) -> None:
        self.what = what
        self.timeout = timeout
        self.detail = detail
        super().__init__(f"{what} not ready after {timeout:.0f}s: {detail}")


class ControlPlane:
    """Start, use and stop one local control plane.

    Use as a context manager or call ``start()``/``stop()``. All state (etcd data,
    certificates, kubeconfigs, logs) lives in ``work_dir``; it is deleted on
    ``stop()`` unless ``keep_work_dir`` is set or ``work_dir`` was given by the caller.
    """

    def __init__(
        self,
        *,
        work_dir: Path | None = None,
        bin_dir: Path | None = None,
        with_controllers: bool = True,
        keep_work_dir: bool = False,
        ready_timeout: float = 120.0,
        node_ip: str | None = None,
        audited_users: tuple[str, ...] = (),
    ) -> None:
        self._owns_work_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="cjob-controlplane-"))
        self.bin_dir = bin_dir or ensure_binaries(names=CONTROL_PLANE_BINARIES)
        self.with_controllers = with_controllers
        self.keep_work_dir = keep_work_dir
        self.ready_timeout = ready_timeout
        self.node_ip = node_ip
        self.audited_users = audited_users
        self.log_dir = self.work_dir / "logs"
        self.pki_dir = self.work_dir / "pki"
        self.components: list[Component] = []
        self.apiserver_port = 0
        self._pki: ClusterPki | None = None
        self._admin: KeyPair | None = None

    # -- public properties -------------------------------------------------------

    @property
    def server(self) -> str:
        """The apiserver URL, ``https://127.0.0.1:<port>``."""
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def pki(self) -> ClusterPki:
        if self._pki is None:
            raise ControlPlaneNotReadyError(what="pki", timeout=0, detail="not started")
        return self._pki

    @property
    def ca_file(self) -> Path:
        return self.pki.ca.cert

    @property
    def audit_log(self) -> Path:
        """Every request of ``audited_users``, one JSON line each (``e2e.controlplane.audit``)."""
        return self.log_dir / "audit.jsonl"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (user ``admin`` in group ``system:masters``)."""
        return self.work_dir / "admin.kubeconfig"

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start every component and wait until each one works."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._pki = build_cluster_pki(
            directory=self.pki_dir,
            extra_ips=(self.node_ip, KUBERNETES_SERVICE_IP) if self.node_ip else (),
        )
        self._admin = issue_cert(
            ca=self.pki.ca,
            directory=self.pki_dir,
            name="admin",
            common_name="admin",
            organizations=("system:masters",),
        )
        kubelet_client = self.issue_client_cert(
            name="apiserver-kubelet-client",
            user="kube-apiserver-kubelet-client",
            groups=("system:masters",),
        )
        etcd_port = self._start_etcd()
        self.apiserver_port = free_port()
        write_kubeconfig(
            path=self.kubeconfig,
            server=self.server,
            ca_file=self.ca_file,
            user="admin",
            client_cert=self._admin.cert,
            client_key=self._admin.key,
        )
        apiserver = self._add(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                *self._address_args(),
                f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={self.pki.serving.cert}",
                f"--tls-private-key-file={self.pki.serving.key}",
                f"--client-ca-file={self.ca_file}",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={self.pki.service_account_pub}",
                f"--service-account-signing-key-file={self.pki.service_account_key}",
                "--authorization-mode=Node,RBAC",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                # Nodes are reached by IP for logs; their host names do not resolve.
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={kubelet_client.cert}",
                f"--kubelet-client-key={kubelet_client.key}",
                f"--cert-dir={self.work_dir / 'apiserver-certs'}",
                "--profiling=false",
                *self._audit_args(),
                "--v=1",
            ],
        )
        self._wait(
            "kube-apiserver /readyz",
            lambda: self._get_text("/readyz") == "ok",
            components=[apiserver],
        )
        if self.with_controllers:
            self._start_controllers()

    def _address_args(self) -> list[str]:
        """Where the apiserver listens and what the ``kubernetes`` Service points at.

        Without a real node only host processes talk to the apiserver, on loopback,
        and the Service cannot point at a loopback address. Pods of a real node live
        in their own network namespaces and reach the apiserver through the Service,
        so it then listens on every address and advertises the node's.
        """
        if self.node_ip is None:
            return [
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
            ]
        return ["--bind-address=0.0.0.0", f"--advertise-address={self.node_ip}"]

    def _audit_args(self) -> list[str]:
        """Audit the requests of ``audited_users`` only, so the log stays small and the
        apiserver does no audit work for anyone else."""
        if not self.audited_users:
            return []
        policy = write_audit_policy(path=self.work_dir / "audit-policy.yaml",
                                    users=self.audited_users)
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
        ]

    def _start_etcd(self) -> int:
        client_port, peer_port = free_port(), free_port()
        etcd = self._add(
            "etcd",
            [
                "--name=default",
                f"--data-dir={self.work_dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{client_port}",
                f"--advertise-client-urls=http://127.0.0.1:{client_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                # Test data is thrown away; fsync only slows every write down.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait(
            "etcd /health",
            lambda: _http_ok(f"http://127.0.0.1:{client_port}/health"),
            components=[etcd],
        )
        return client_port

    def _start_controllers(self) -> None:
        cm_config = self.write_client_kubeconfig(
            name="controller-manager", user="system:kube-controller-manager"
        )
        sched_config = self.write_client_kubeconfig(name="scheduler", user="system:kube-scheduler")
        cm_port, sched_port = free_port(), free_port()
        cm = self._add(
            "kube-controller-manager",
            [
                f"--kubeconfig={cm_config}",
                f"--authentication-kubeconfig={cm_config}",
                f"--authorization-kubeconfig={cm_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={cm_port}",
                f"--cert-dir={self.work_dir / 'controller-manager-certs'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.pki.service_account_key}",
                f"--root-ca-file={self.ca_file}",
                f"--cluster-signing-cert-file={self.pki.ca.cert}",
                f"--cluster-signing-key-file={self.pki.ca.key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--controllers=*",
                "--v=1",
            ],
        )
        scheduler = self._add(
            "kube-scheduler",
            [
                f"--kubeconfig={sched_config}",
                f"--authentication-kubeconfig={sched_config}",
                f"--authorization-kubeconfig={sched_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={sched_port}",
                f"--cert-dir={self.work_dir / 'scheduler-certs'}",
                "--leader-elect=false",
                "--v=1",
            ],
        )
        both = [cm, scheduler]
        self._wait(
            "kube-controller-manager /healthz",
            lambda: _http_ok(f"https://127.0.0.1:{cm_port}/healthz", insecure=True),
            components=both,
        )
        self._wait(
            "kube-scheduler /healthz",
            lambda: _http_ok(f"https://127.0.0.1:{sched_port}/healthz", insecure=True),
            components=both,
        )
        # The service account controller is what lets pods be admitted at all.
        self._wait(
            "default service account",
            lambda: self._get_status("/api/v1/namespaces/default/serviceaccounts/default") == 200,
            components=both,
        )

    def stop(self) -> None:
        """Stop components in reverse start order and remove the work dir if owned."""
        for component in reversed(self.components):
            component.stop()
        self.components = []
        if self._owns_work_dir and not self.keep_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def is_running(self) -> bool:
        return bool(self.components) and all(c.is_running() for c in self.components)

    # -- identities ----------------------------------------------------------------

    def issue_client_cert(self, *, name: str, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """A client certificate for ``user`` in ``groups``, signed by the cluster CA."""
        return issue_cert(
            ca=self.pki.ca,
            directory=self.pki_dir,
            name=name,
            common_name=user,
            organizations=groups,
        )

    def write_client_kubeconfig(
        self, *, name: str, user: str, groups: tuple[str, ...] = ()
    ) -> Path:
        """A kubeconfig in the work dir that authenticates as ``user`` by certificate."""
        pair = self.issue_client_cert(name=name, user=user, groups=groups)
        return write_kubeconfig(
            path=self.work_dir / f"{name}.kubeconfig",
            server=self.server,
            ca_file=self.ca_file,
            user=user,
            client_cert=pair.cert,
            client_key=pair.key,
        )

    def admin_rest(self) -> RestClient:
        """A small standard-library REST client authenticated as the admin."""
        admin = self._admin
        if admin is None:
            raise ControlPlaneNotReadyError(what="admin identity", timeout=0, detail="not started")
        return RestClient(
            server=self.server, ca_file=self.ca_file, client_cert=admin.cert, client_key=admin.key
        )

    def new_api_client(self, *, kubeconfig: Path | None = None) -> Any:
        """A ``kubernetes.client.ApiClient`` for the admin (or the given kubeconfig)."""
        from kubernetes import config

        new_client: Any = config.new_client_from_config
        return new_client(config_file=str(kubeconfig or self.kubeconfig))

    # -- plumbing --------------------------------------------------------------------

    def _add(self, name: str, args: list[str]) -> Component:
        component = Component(
            name=name, argv=[str(self.bin_dir / name), *args], log_file=self.log_dir / f"{name}.log"
        )
        self.components.append(component)
        component.start()
        return component

    def _wait(self, what: str, check: Callable[[], bool], *, components: list[Component]) -> None:
        deadline = time.monotonic() + self.ready_timeout
        detail = "no answer yet"
        while True:
            for component in components:
                component.check_running()
            try:
                if check():
                    return
            except (OSError, urllib.error.URLError, ValueError) as exc:
                detail = repr(exc)
            if time.monotonic() > deadline:
                raise ControlPlaneNotReadyError(
                    what=what, timeout=self.ready_timeout, detail=detail
                )
            time.sleep(0.25)

    def _admin_context(self) -> ssl.SSLContext:
        admin = self._admin
        if admin is None:
            raise ControlPlaneNotReadyError(what="admin identity", timeout=0, detail="not started")
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(admin.cert), str(admin.key))
        return ctx

    def _get_status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(
                self.server + path, context=self._admin_context(), timeout=5
            ) as resp:
                status: int = resp.status
                return status
        except urllib.error.HTTPError as err:
            return err.code

    def _get_text(self, path: str) -> str:
        with urllib.request.urlopen(
            self.server + path, context=self._admin_context(), timeout=5
        ) as resp:
            body: bytes = resp.read()
            return body.decode()

    def get_json(self, path: str) -> Any:
        """GET ``path`` from the apiserver as admin and decode the JSON answer."""
        return json.loads(self._get_text(path))


def _http_ok(url: str, *, insecure: bool = False) -> bool:
    ctx = None
    if url.startswith("https://"):
        ctx = ssl.create_default_context()
        if insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
            ok: bool = resp.status == 200
            return ok
    except urllib.error.HTTPError:
        return False
