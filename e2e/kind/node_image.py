"""The kind node image, built here from the project's Debian base and its own binaries.

``kind build node-image`` downloads the control plane's images from a registry this
machine cannot reach, so the node image is made the way the project's other images
are: ``e2e/kind/node/Dockerfile`` on the Debian base (``docker/base/``), with
containerd, runc, kubelet, kubeadm and kubectl built by ``e2e/controlplane/build.sh``,
and the images kubeadm's control plane runs (kube-apiserver, kube-controller-manager,
kube-scheduler, etcd, CoreDNS, the pause sandbox as single-binary images; kube-proxy
with iptables from the Dockerfile's first stage) in ``/kind/images``, imported into
the node's containerd before its kubelet starts. Their names are the project's
(``checkpointed-jobs/<component>:<version>``): :data:`KUBEADM_PATCH` tells kubeadm.

The image's tag carries a hash of every input, so an unchanged tree reuses the image
already in the engine.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from e2e.controlplane.binaries import read_versions
from e2e.kind.engine import DockerEngine, EngineError
from e2e.realnode.small_images import ImageFile, SmallImage, write_archive

Log = Callable[[str], None]

NODE_DIR = Path(__file__).resolve().parent / "node"
REPOSITORY = "checkpointed-jobs"
#: Binaries the node itself runs (the Dockerfile copies bin/ to /usr/local/bin).
NODE_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr", "kubelet", "kubeadm", "kubectl")

_VERSIONS = read_versions()
KUBE_VERSION = _VERSIONS.kubernetes
ETCD_TAG = _VERSIONS.etcd
COREDNS_TAG = _VERSIONS.coredns.lstrip("v")
PAUSE_TAG = _VERSIONS.pause

#: The kubeadm settings that name this image's control plane images; only for this
#: node image (kind's own images hold registry.k8s.io's).
KUBEADM_PATCH = f"""\
kind: ClusterConfiguration
imageRepository: {REPOSITORY}
etcd:
  local:
    imageTag: "{ETCD_TAG}"
dns:
  imageTag: "{COREDNS_TAG}"
"""


def control_plane_images(*, bin_dir: Path) -> list[SmallImage]:
    """The single-binary images of kubeadm's static pods, CoreDNS and the sandbox."""
    images = [
        SmallImage(
            tag=f"{REPOSITORY}/{name}:{tag}",
            files=(ImageFile(source=bin_dir / name, target=f"/usr/local/bin/{name}"),),
            entrypoint=(f"/usr/local/bin/{name}",),
        )
        for name, tag in (
            ("kube-apiserver", KUBE_VERSION),
            ("kube-controller-manager", KUBE_VERSION),
            ("kube-scheduler", KUBE_VERSION),
            ("etcd", ETCD_TAG),
        )
    ]
    images.append(SmallImage(
        tag=f"{REPOSITORY}/coredns:{COREDNS_TAG}",
        files=(ImageFile(source=bin_dir / "coredns", target="/coredns"),),
        entrypoint=("/coredns",),
    ))  # fmt: skip
    images.append(SmallImage(
        tag=f"{REPOSITORY}/pause:{PAUSE_TAG}",
        files=(ImageFile(source=bin_dir / "pause", target="/pause"),),
        entrypoint=("/pause",),
        user="65535",
    ))  # fmt: skip
    return images


def _input_files(*, bin_dir: Path) -> list[Path]:
    files = sorted(p for p in NODE_DIR.rglob("*") if p.is_file())
    names = (*NODE_BINARIES, "kube-proxy", "kube-apiserver", "kube-controller-manager",
             "kube-scheduler", "etcd", "coredns", "pause")  # fmt: skip
    return files + [(bin_dir / n).resolve() for n in names]


def input_key(*, bin_dir: Path, base_reference: str) -> str:
    """A hash of the Dockerfile, its files, the binaries and the base image."""
    digest = hashlib.sha256(f"{base_reference}\n{KUBE_VERSION}\n".encode())
    for path in _input_files(bin_dir=bin_dir):
        label = path.relative_to(NODE_DIR) if path.is_relative_to(NODE_DIR) else path.name
        digest.update(f"{label}\n".encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def node_image_tag(key: str) -> str:
    return f"{REPOSITORY}/kind-node:{KUBE_VERSION}-{key[:12]}"


def build_node_image(*, engine: DockerEngine, bin_dir: Path, log: Log) -> str:
    """The node image in ``engine``, built when its inputs changed; returns its tag."""
    from e2e.images import build_with_docker, make_plan

    base = make_plan().base_reference
    build_with_docker(log=log, base_only=True, env=engine.env())  # the cached rootfs
    tag = node_image_tag(input_key(bin_dir=bin_dir, base_reference=base))
    if engine.docker("image", "inspect", tag, check=False).returncode == 0:
        log(f"node image present: {tag}")
        return tag
    with tempfile.TemporaryDirectory(prefix="cjob-kind-node-") as tmp:
        context = Path(tmp)
        shutil.copytree(NODE_DIR, context, dirs_exist_ok=True)
        for folder in ("bin", "proxy", "images"):
            (context / folder).mkdir()
        for name in NODE_BINARIES:
            shutil.copy(bin_dir / name, context / "bin" / name)
        shutil.copy(bin_dir / "kube-proxy", context / "proxy" / "kube-proxy")
        common = ["build", "--network", "host", "--build-arg", f"BASE_IMAGE={base}"]
        proxy_tag = f"{REPOSITORY}/kube-proxy:{KUBE_VERSION}"
        log(f"building {proxy_tag}")
        _build(engine, [*common, "--target", "kube-proxy", "--tag", proxy_tag, str(context)])
        engine.docker("save", "--output", str(context / "images" / "kube-proxy.tar"), proxy_tag)
        for image in control_plane_images(bin_dir=bin_dir):
            name = image.tag.split("/", 1)[1].split(":", 1)[0]
            write_archive(image=image, path=context / "images" / f"{name}.tar")
        log(f"building {tag}")
        _build(engine, [*common, "--target", "node", "--build-arg", f"KUBE_VERSION={KUBE_VERSION}",
                        "--tag", tag, str(context)])  # fmt: skip
    _drop_older(engine, keep=tag, log=log)
    return tag


def _build(engine: DockerEngine, args: list[str]) -> None:
    proc = engine.docker(*args, check=False, timeout=1800)
    if proc.returncode != 0:
        output = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise EngineError(f"docker {' '.join(args[:2])} of the kind node image failed:\n{output}")


def _drop_older(engine: DockerEngine, *, keep: str, log: Log) -> None:
    """Older node images of this project, so the data root does not grow per change."""
    listing = engine.docker("images", "--format", "{{.Repository}}:{{.Tag}}",
                            f"{REPOSITORY}/kind-node", check=False).stdout  # fmt: skip
    for reference in listing.split():
        if reference != keep:
            log(f"removing the older node image {reference}")
            engine.docker("rmi", reference, check=False)
