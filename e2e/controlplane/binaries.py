"""Locate the control plane binaries built by ``build.sh``.

The versions live in ``versions.env`` next to this file so that the build script and
the Python harness can never disagree about which binaries a test run uses. The
directory can be overridden with ``CJOB_BIN_DIR`` (for binaries built elsewhere).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
VERSIONS_FILE = HERE / "versions.env"

CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
NODE_BINARIES = (
    "kubelet",
    "kube-proxy",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "coredns",
    "pause",
    "versitygw",
)
#: What the kind scenarios add: kubeadm for the node image built here, and kind.
KIND_BINARIES = ("kubeadm", "kind")
#: Prometheus and promtool: the chart's alerts and dashboard, evaluated in the tests.
MONITORING_BINARIES = ("prometheus", "promtool")
#: krew: installs the kubectl plugin's archive with its manifest.
PLUGIN_BINARIES = ("krew",)
ALL_BINARIES = (*CONTROL_PLANE_BINARIES, "kubectl", "helm", "kwok", *NODE_BINARIES, *KIND_BINARIES,
                *MONITORING_BINARIES, *PLUGIN_BINARIES)


class MissingBinariesError(RuntimeError):
    """Raised when some control plane binaries are not built yet."""

    def __init__(self, *, bin_dir: Path, missing: list[str]) -> None:
        self.bin_dir = bin_dir
        self.missing = missing
        super().__init__(
            f"control plane binaries missing in {bin_dir}: {', '.join(missing)}; "
            f"build them with e2e/controlplane/build.sh"
        )


class BuildFailedError(RuntimeError):
    """Raised when ``build.sh`` exits with an error."""

    def __init__(self, *, returncode: int, output_tail: str) -> None:
        self.returncode = returncode
        self.output_tail = output_tail
        super().__init__(f"build.sh failed with exit code {returncode}:\n{output_tail}")


@dataclass(frozen=True)
class Versions:
    """The pinned versions of the toolset."""

    kubernetes: str
    etcd: str
    helm: str
    kwok: str
    containerd: str
    coredns: str
    coredns_build: str
    pause: str
    versitygw: str
    kind: str
    prometheus: str
    krew: str


def read_versions(*, path: Path = VERSIONS_FILE) -> Versions:
    """Read ``versions.env`` (plain ``KEY=value`` lines, ``#`` comments)."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return Versions(
        kubernetes=values["KUBERNETES_VERSION"],
        etcd=values["ETCD_VERSION"],
        helm=values["HELM_VERSION"],
        kwok=values["KWOK_VERSION"],
        containerd=values["CONTAINERD_VERSION"],
        coredns=values["COREDNS_VERSION"],
        coredns_build=values["COREDNS_BUILD"],
        pause=values["PAUSE_VERSION"],
        versitygw=values["VERSITYGW_VERSION"],
        kind=values["KIND_VERSION"],
        prometheus=values["PROMETHEUS_VERSION"],
        krew=values["KREW_VERSION"],
    )


def cache_dir() -> Path:
    """The cache root shared with ``build.sh`` (``CJOB_CACHE_DIR`` overrides it)."""
    configured = os.environ.get("CJOB_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "checkpointed-jobs"


def default_bin_dir(*, versions: Versions | None = None) -> Path:
    """The directory ``build.sh --print-bin-dir`` prints, computed without running it."""
    v = versions or read_versions()
    name = (
        f"set-k8s-{v.kubernetes}-etcd-{v.etcd}-helm-{v.helm}-kwok-{v.kwok}"
        f"-containerd-{v.containerd}-coredns-{v.coredns}-{v.coredns_build}-pause-{v.pause}"
        f"-versitygw-{v.versitygw}-kind-{v.kind}-prometheus-{v.prometheus}-krew-{v.krew}"
    )
    return cache_dir() / "bin" / name


def find_bin_dir() -> Path:
    """The bin dir to use: ``CJOB_BIN_DIR`` when set, else the pinned build's."""
    configured = os.environ.get("CJOB_BIN_DIR")
    if configured:
        return Path(configured)
    return default_bin_dir()


def missing_binaries(*, bin_dir: Path, names: tuple[str, ...] = ALL_BINARIES) -> list[str]:
    """Names of the binaries that are absent or not executable in ``bin_dir``."""
    return [n for n in names if not os.access(bin_dir / n, os.X_OK)]


def ensure_binaries(*, names: tuple[str, ...] = ALL_BINARIES, build: bool = False) -> Path:
    """Return the bin dir holding ``names``; build them first when ``build`` is set.

    Building from scratch takes a long time (tens of minutes on two cores), so callers
    decide whether that is acceptable; by default a missing binary is an error.
    """
    bin_dir = find_bin_dir()
    missing = missing_binaries(bin_dir=bin_dir, names=names)
    if not missing:
        return bin_dir
    if not build or shutil.which("go") is None or "CJOB_BIN_DIR" in os.environ:
        raise MissingBinariesError(bin_dir=bin_dir, missing=missing)
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BuildFailedError(returncode=proc.returncode, output_tail=proc.stdout[-4000:])
    missing = missing_binaries(bin_dir=bin_dir, names=names)
    if missing:
        raise MissingBinariesError(bin_dir=bin_dir, missing=missing)
    return bin_dir
