"""Single-layer image archives for the node's own small images (pause, CoreDNS).

There is no registry here, so the sandbox and DNS images are made from the static
binaries ``build.sh`` compiles: one layer holding the files, a config naming the
entrypoint, packed in the docker-archive layout that ``ctr images import`` reads.
The archive is deterministic (fixed times and owners), so an unchanged binary
gives an identical image id and a re-import is a no-op.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ImageFile:
    """One file of an image: where it comes from, where it goes, its mode."""

    source: Path
    target: str
    mode: int = 0o755


@dataclass(frozen=True)
class SmallImage:
    """What a single-layer image holds and how it starts."""

    tag: str
    files: tuple[ImageFile, ...]
    entrypoint: tuple[str, ...]
    user: str = "0"
    env: tuple[str, ...] = field(default=("PATH=/usr/local/bin:/usr/bin:/bin",))


def _add_dirs(tar: tarfile.TarFile, *, path: str, seen: set[str]) -> None:
    parts = path.strip("/").split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        directory = "/".join(parts[:depth])
        if directory in seen:
            continue
        seen.add(directory)
        info = tarfile.TarInfo(directory)
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        tar.addfile(info)


def layer_bytes(*, files: tuple[ImageFile, ...]) -> bytes:
    """The layer as an uncompressed tar, byte for byte the same for the same files."""
    buffer = io.BytesIO()
    seen: set[str] = set()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for item in sorted(files, key=lambda f: f.target):
            _add_dirs(tar, path=item.target, seen=seen)
            data = item.source.read_bytes()
            info = tarfile.TarInfo(item.target.strip("/"))
            info.size = len(data)
            info.mode = item.mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def write_archive(*, image: SmallImage, path: Path) -> str:
    """Write ``image`` as a docker-archive tar at ``path``; return its image id."""
    layer = layer_bytes(files=image.files)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "Entrypoint": list(image.entrypoint),
            "Env": list(image.env),
            "User": image.user,
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "checkpointed-jobs"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    image_id = hashlib.sha256(config_bytes).hexdigest()
    manifest = [
        {
            "Config": f"{image_id}.json",
            "RepoTags": [image.tag],
            "Layers": [f"{diff_id.removeprefix('sha256:')}/layer.tar"],
        }
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    with tarfile.open(partial, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (
            (f"{image_id}.json", config_bytes),
            (f"{diff_id.removeprefix('sha256:')}/layer.tar", layer),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    partial.replace(path)
    return "sha256:" + image_id
