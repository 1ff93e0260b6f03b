"""A real Kubernetes node on this machine: containerd + runc, kubelet, kube-proxy,
a CNI bridge network with NAT, and cluster DNS.

Pods are real containers: their own network namespace and IP on the bridge
``cni0`` (10.244.0.0/24), their own root filesystem from an image imported into
containerd, volumes mounted by the kubelet, Services through kube-proxy's iptables
rules, and names resolved by CoreDNS at 10.96.0.10. Nothing is pulled: the sandbox
(pause) and CoreDNS images are packed here from binaries ``build.sh`` compiles, and
the project's images are imported from archives (``e2e.images``).

The node's address is the bridge's gateway, 10.244.0.1, created before the kubelet
starts: pods reach the host (the apiserver, the kubelet) on their own link, and the
node owns no address outside the pod network. What the node changes on the host is
recorded first and put back by :meth:`RealNode.stop` (``host.py``), or, when the
node was killed before it could stop, by the next node to start (``lease.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from e2e.controlplane.controlplane import ControlPlane
from e2e.controlplane.procs import Component, ProcessExitedError, free_port, tail_file
from e2e.controlplane.rest import ApiError, RestClient
from e2e.images.containerd import import_archive
from e2e.realnode import dns
from e2e.realnode.host import HostSnapshot, write_sysctl
from e2e.realnode.lease import (
    LEASE_PATH,
    HostBusyError,
    HostLease,
    NodeRecord,
    claim_host,
    clear_node,
)
from e2e.realnode.small_images import write_archive

NODE_IP = "10.244.0.1"
POD_CIDR = "10.244.0.0/24"
CLUSTER_CIDR = "10.244.0.0/16"
BRIDGE = "cni0"
CNI_BIN_DIR = Path("/usr/lib/cni")
RUNC = Path("/usr/sbin/runc")

#: Debian packages the node needs on the host (runc, the CNI plugins, iptables for
#: kube-proxy and the bridge plugin's NAT, conntrack for kube-proxy's UDP clean-up).
HOST_PACKAGES = ("runc", "containernetworking-plugins", "iptables", "conntrack")


class NodeNotReadyError(RuntimeError):
    """Raised when a part of the node does not come up; says which and why."""


@dataclass(frozen=True)
class ImageArchive:
    """An image archive to import into the node's containerd, and its tag."""

    tag: str
    path: Path


def missing_host_tools() -> list[str]:
    """The host programs the node needs that are not installed."""
    needed = {
        "runc": RUNC.exists(),
        "CNI plugins (bridge, host-local, loopback, portmap)": all(
            (CNI_BIN_DIR / p).exists() for p in ("bridge", "host-local", "loopback", "portmap")
        ),
        "iptables": shutil.which("iptables") is not None,
        "conntrack": shutil.which("conntrack") is not None,
    }
    return [name for name, ok in needed.items() if not ok]


class RealNode:
    """Start, use and stop one real node registered with ``control_plane``.

    The control plane must be started with ``node_ip=NODE_IP`` so that the
    ``kubernetes`` Service points at an address pods can reach.
    """

    def __init__(
        self,
        *,
        control_plane: ControlPlane,
        bin_dir: Path,
        work_dir: Path | None = None,
        name: str = "node-1",
        images: Sequence[ImageArchive] = (),
        log: Callable[[str], None] = lambda _: None,
        ready_timeout: float = 180.0,
        lease_path: Path = LEASE_PATH,
    ) -> None:
        if control_plane.node_ip != NODE_IP:
            raise ValueError(f"the control plane must advertise the node address {NODE_IP}")
        self.control_plane = control_plane
        self.bin_dir = bin_dir
        self._owns_work_dir = work_dir is None
        # Short: containerd's and the shims' unix sockets live below it.
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="cjob-node-"))
        self.name = name
        self.images = tuple(images)
        self.log = log
        self.ready_timeout = ready_timeout
        self.log_dir = self.work_dir / "logs"
        self.components: list[Component] = []
        self.lease_path = lease_path
        self._lease: HostLease | None = None
        self._record: NodeRecord | None = None

    # -- paths ---------------------------------------------------------------------

    @property
    def containerd_socket(self) -> Path:
        return self.work_dir / "containerd" / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.work_dir / "kubelet"

    @property
    def pod_logs_dir(self) -> Path:
        return self.work_dir / "pod-logs"

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> RealNode:
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
        """Bring every part up, register the node, start cluster DNS; wait for all."""
        missing = missing_host_tools()
        if missing:
            raise NodeNotReadyError(
                f"the node needs {', '.join(missing)}: apt-get install {' '.join(HOST_PACKAGES)}"
            )
        try:
            self._lease = claim_host(bridge=BRIDGE, path=self.lease_path, log=self.log)
        except HostBusyError as exc:
            raise NodeNotReadyError(str(exc)) from None
        try:
            # Recorded before the host changes, so a node killed from here on is
            # undone by the next one (``lease.py``).
            self._record = NodeRecord(
                pid=os.getpid(),
                work_dir=self.work_dir,
                owns_work_dir=self._owns_work_dir,
                bin_dir=self.bin_dir,
                snapshot=HostSnapshot.capture(),
            )
            self._lease.record(self._record)
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        t0 = time.monotonic()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._prepare_host()
        self._start_containerd()
        self._import_images()
        self._start_kubelet()
        self._start_kube_proxy()
        self._wait("node Ready", self._node_ready)
        self._start_dns()
        self.log(f"node {self.name} ready in {time.monotonic() - t0:.1f}s")

    def stop(self) -> None:
        """Stop every part and put the host back as it was."""
        for component in reversed(self.components):
            component.stop(timeout=5.0)
        self.components = []
        if self._record is not None:
            # Also removes the work dir when the node made it.
            for problem in clear_node(self._record):
                self.log(f"host not fully restored: {problem}")
            self._record = None
            if self._lease is not None:
                self._lease.forget()
        elif self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    # -- host ----------------------------------------------------------------------

    def _prepare_host(self) -> None:
        """The bridge with the node's address, forwarding, and bridged traffic
        through iptables (so a pod reaching a Service backed by a pod on the same
        bridge gets its answer through the host's connection tracking)."""
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        write_sysctl("net.ipv4.ip_forward", "1")
        write_sysctl("net.bridge.bridge-nf-call-iptables", "1")

    # -- containerd ----------------------------------------------------------------

    def _containerd_config(self) -> Path:
        base = self.work_dir / "containerd"
        cni_conf = base / "cni-conf"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-cjob.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        config = f"""version = 3
root = "{base / "root"}"
state = "{base / "state"}"

[grpc]
  address = "{self.containerd_socket}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{dns.PAUSE_TAG}"

[plugins.'io.containerd.cri.v1.runtime']
  # Root here lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj, and every
  # sandbox would fail with a misleading "can't get final child's PID" error.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "{RUNC}"
      SystemdCgroup = false
      Root = "{base / "runc"}"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{CNI_BIN_DIR}"]
    conf_dir = "{cni_conf}"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""
        path = base / "config.toml"
        path.write_text(config)
        return path

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": "cjob-pods",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": True,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.work_dir / "cni-ipam"),
                        "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }

    def _start_containerd(self) -> None:
        config = self._containerd_config()
        env = {"PATH": f"{self.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.work_dir)}
        containerd = self._add("containerd", ["--config", str(config)], env=env)
        self._wait(
            "containerd socket",
            lambda: self.containerd_socket.exists() and self.ctr("version").returncode == 0,
            components=[containerd],
        )

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``ctr`` against this node's containerd, namespace ``k8s.io``."""
        return subprocess.run(
            [
                str(self.bin_dir / "ctr"),
                "--address",
                str(self.containerd_socket),
                "-n",
                "k8s.io",
                *args,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )

    def _import_images(self) -> None:
        images_dir = self.work_dir / "images"
        own = [
            (dns.pause_image(bin_dir=self.bin_dir), images_dir / "pause.tar"),
            (dns.coredns_image(bin_dir=self.bin_dir), images_dir / "coredns.tar"),
        ]
        archives = []
        for image, path in own:
            write_archive(image=image, path=path)
            archives.append(ImageArchive(tag=image.tag, path=path))
        for archive in (*archives, *self.images):
            self.import_image(archive)

    def import_image(self, archive: ImageArchive) -> None:
        """Import an image archive so pods can use it without pulling."""
        import_archive(
            ctr=self.bin_dir / "ctr",
            address=self.containerd_socket,
            archive=archive.path,
            tag=archive.tag,
            log=self.log,
        )

    # -- kubelet and kube-proxy ----------------------------------------------------

    def _start_kubelet(self) -> None:
        plane = self.control_plane
        kubeconfig = plane.write_client_kubeconfig(
            name=f"kubelet-{self.name}", user=f"system:node:{self.name}", groups=("system:nodes",)
        )
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # The apiserver dials the kubelet on the node's address for logs and exec.
            "address": NODE_IP,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(plane.ca_file)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "clusterDNS": [dns.CLUSTER_DNS_IP],
            "clusterDomain": "cluster.local",
            "podCIDR": POD_CIDR,
            "resolvConf": "/etc/resolv.conf",
            "podLogsDir": str(self.pod_logs_dir),
            "volumePluginDir": str(self.work_dir / "volume-plugins"),
            "protectKernelDefaults": False,
            "serializeImagePulls": False,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "rotateCertificates": False,
            "serverTLSBootstrap": False,
            "shutdownGracePeriod": "0s",
            "maxPods": 110,
        }
        config_path = self.work_dir / "kubelet-config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        kubelet = self._add(
            "kubelet",
            [
                f"--config={config_path}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={self.kubelet_root}",
                f"--cert-dir={self.work_dir / 'kubelet-pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ],
        )
        self._wait("node registered", self._node_registered, components=[kubelet])

    def _start_kube_proxy(self) -> None:
        kubeconfig = self.control_plane.write_client_kubeconfig(
            name="kube-proxy", user="system:kube-proxy"
        )
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "mode": "iptables",
            "clusterCIDR": CLUSTER_CIDR,
            "hostnameOverride": self.name,
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            # Leave the host's conntrack settings alone.
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            # NodePorts on the node's address only, never on loopback (which would
            # need route_localnet) or the machine's other interfaces.
            "iptables": {"localhostNodePorts": False},
            "nodePortAddresses": [f"{NODE_IP}/32"],
        }
        config_path = self.work_dir / "kube-proxy-config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        self._add("kube-proxy", [f"--config={config_path}", "--v=1"])

    def _node(self) -> dict[str, Any] | None:
        try:
            node: dict[str, Any] = self.rest().get(f"/api/v1/nodes/{self.name}")
            return node
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def _node_registered(self) -> bool:
        return self._node() is not None

    def _node_ready(self) -> bool:
        node = self._node() or {}
        conditions = node.get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _start_dns(self) -> None:
        rest = self.rest()
        for obj in dns.manifests():
            dns.apply(rest, obj)
        self._wait("cluster DNS ready", lambda: dns.is_ready(rest))

    # -- plumbing --------------------------------------------------------------------

    def rest(self) -> RestClient:
        return self.control_plane.admin_rest()

    def _add(self, name: str, args: list[str], *, env: dict[str, str] | None = None) -> Component:
        component = Component(
            name=name,
            argv=[str(self.bin_dir / name), *args],
            log_file=self.log_dir / f"{name}.log",
            env=env,
        )
        self.components.append(component)
        component.start()
        return component

    def _wait(
        self,
        what: str,
        check: Callable[[], bool],
        *,
        components: Sequence[Component] | None = None,
    ) -> None:
        watched = list(components) if components is not None else list(self.components)
        deadline = time.monotonic() + self.ready_timeout
        detail = "no answer yet"
        while True:
            for component in watched:
                try:
                    component.check_running()
                except ProcessExitedError as exc:
                    raise NodeNotReadyError(f"{what}: {exc}") from exc
            try:
                if check():
                    return
            except (OSError, ApiError, subprocess.SubprocessError) as exc:
                detail = repr(exc)
            if time.monotonic() > deadline:
                logs = "\n".join(
                    f"--- {c.name}\n{tail_file(c.log_file, lines=15)}" for c in watched
                )
                raise NodeNotReadyError(
                    f"{what}: not after {self.ready_timeout:.0f}s ({detail})\n{logs}"
                )
            time.sleep(0.25)


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NodeNotReadyError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
