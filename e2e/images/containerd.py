"""Load built image archives into containerd, where the kubelet finds them.

Pods name their images by short reference (``checkpointed-jobs/runtime:0.1.0``) with
``imagePullPolicy: IfNotPresent`` or ``Never``; there is no registry to pull from, so
the images must already be in the containerd namespace the CRI plugin uses
(``k8s.io``). ``ctr images import`` reads a docker-archive, normalises its short
``RepoTags`` the same way the kubelet normalises a pod's image, and unpacks the layers
into the snapshotter the CRI plugin runs containers from.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from e2e.images.builder import BuiltImages


class ImageImportError(RuntimeError):
    """``ctr images import`` failed; the message holds its command and output."""


def import_command(
    *,
    ctr: Path,
    address: Path,
    archive: Path,
    namespace: str = "k8s.io",
    snapshotter: str | None = None,
) -> list[str]:
    """The ``ctr`` command line importing one archive."""
    argv = [str(ctr), "--address", str(address), "--namespace", namespace, "images", "import"]
    if snapshotter is not None:
        argv += ["--snapshotter", snapshotter]
    argv.append(str(archive))
    return argv


def import_archive(
    *,
    ctr: Path,
    address: Path,
    archive: Path,
    tag: str,
    namespace: str = "k8s.io",
    snapshotter: str | None = None,
    log: Callable[[str], None] | None = None,
    timeout: float = 900.0,
) -> None:
    """Import one docker-archive into containerd at socket ``address``.

    ``snapshotter`` must name the CRI plugin's snapshotter when it is not containerd's
    default (overlayfs), or the kubelet would find the image but unpack it again.
    ``timeout`` bounds the import (the runtime archive is over a gigabyte).
    """
    argv = import_command(
        ctr=ctr, address=address, archive=archive, namespace=namespace, snapshotter=snapshotter,
    )  # fmt: skip
    start = time.monotonic()
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise ImageImportError(f"`{shlex.join(argv)}` took longer than {timeout:.0f}s") from exc
    except OSError as exc:
        raise ImageImportError(f"cannot run {ctr}: {exc}") from exc
    if proc.returncode != 0:
        raise ImageImportError(
            f"`{shlex.join(argv)}` failed with exit code {proc.returncode}:\n"
            f"{(proc.stderr or proc.stdout).strip()}"
        )
    if log is not None:
        log(f"[images] imported {tag} into {namespace} in {time.monotonic() - start:.1f}s")


def import_images(
    *,
    ctr: Path,
    address: Path,
    images: BuiltImages,
    namespace: str = "k8s.io",
    snapshotter: str | None = None,
    log: Callable[[str], None] | None = None,
    timeout: float = 900.0,
) -> None:
    """Import the operator and runtime archives (see :func:`import_archive`)."""
    for image in images.all():
        import_archive(
            ctr=ctr, address=address, archive=image.archive, tag=image.tag,
            namespace=namespace, snapshotter=snapshotter, log=log, timeout=timeout,
        )  # fmt: skip
