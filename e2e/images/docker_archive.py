"""Docker-archive files (``docker save`` format) named the way containerd expects.

``buildah push`` writes a docker-archive whose ``manifest.json`` lists every name the
image has in buildah's storage, fully qualified. Imported into containerd, each would
become an image of its own. The builder rewrites the names to exactly one short
reference (``checkpointed-jobs/runtime:0.1.0``): containerd normalises a short name
itself, to the same name the kubelet looks up for a pod's ``image:``.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
REPOSITORIES = "repositories"


def _split_reference(reference: str) -> tuple[str, str]:
    repository, sep, tag = reference.rpartition(":")
    if not sep or not repository or "/" in tag:
        raise ValueError(f"image reference {reference!r} has no tag")
    return repository, tag


def retag_manifest(manifest: Any, *, reference: str) -> list[dict[str, Any]]:
    """``manifest.json`` content naming its single image ``reference`` only."""
    if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
        raise ValueError("a docker-archive manifest.json with exactly one image was expected")
    _split_reference(reference)
    entry = dict(manifest[0])
    entry["RepoTags"] = [reference]
    return [entry]


def retag_repositories(repositories: Any, *, reference: str) -> dict[str, dict[str, str]] | None:
    """The legacy ``repositories`` file naming ``reference`` only (same layer id), or
    None when it names nothing (the file is then left out: readers use manifest.json)."""
    if not isinstance(repositories, dict):
        raise ValueError("docker-archive repositories file is not a JSON object")
    layer_ids = {
        layer
        for tags in repositories.values()
        if isinstance(tags, dict)
        for layer in tags.values()
        if isinstance(layer, str)
    }
    if not layer_ids:
        return None
    if len(layer_ids) != 1:
        raise ValueError(f"repositories names {len(layer_ids)} top layers, expected one")
    repository, tag = _split_reference(reference)
    return {repository: {tag: layer_ids.pop()}}


def rewrite_names(*, source: Path, destination: Path, reference: str) -> None:
    """Copy the docker-archive ``source`` to ``destination``, naming it ``reference``.

    Streams member by member (the layers are copied, not loaded), writes to a
    temporary file next to ``destination`` and renames it into place, so a reader never
    sees a half-written archive.
    """
    partial = destination.with_name(destination.name + ".partial")
    seen_manifest = False
    try:
        with (
            tarfile.open(source, "r:") as src,
            tarfile.open(partial, "w:", format=tarfile.PAX_FORMAT) as dst,
        ):
            for member in src:
                if member.name in (MANIFEST, REPOSITORIES) and member.isfile():
                    f = src.extractfile(member)
                    assert f is not None
                    data = json.load(f)
                    if member.name == MANIFEST:
                        seen_manifest = True
                        new: Any = retag_manifest(data, reference=reference)
                    else:
                        new = retag_repositories(data, reference=reference)
                        if new is None:
                            continue
                    payload = json.dumps(new, separators=(",", ":")).encode()
                    info = tarfile.TarInfo(member.name)
                    info.size = len(payload)
                    info.mode = member.mode
                    info.mtime = member.mtime
                    dst.addfile(info, io.BytesIO(payload))
                elif member.isfile():
                    dst.addfile(member, src.extractfile(member))
                else:
                    dst.addfile(member)
        if not seen_manifest:
            raise ValueError(f"{source} has no {MANIFEST}: not a docker-archive")
        os.replace(partial, destination)
    finally:
        partial.unlink(missing_ok=True)


def read_repo_tags(archive: Path) -> list[str]:
    """The ``RepoTags`` of a docker-archive (what ``ctr images import`` will name)."""
    with tarfile.open(archive, "r:") as tar:
        f = tar.extractfile(MANIFEST)
        if f is None:
            raise ValueError(f"{archive} has no {MANIFEST}")
        manifest = json.load(f)
    tags: list[str] = []
    for entry in manifest:
        tags.extend(entry.get("RepoTags") or [])
    return tags
