"""The node's own images are packed deterministically, in the layout containerd's
``ctr images import`` reads (checked here without containerd; the real-node
scenarios import them)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from e2e.realnode.small_images import ImageFile, SmallImage, write_archive


def _image(binary: Path) -> SmallImage:
    return SmallImage(
        tag="checkpointed-jobs/probe:1",
        files=(ImageFile(source=binary, target="/bin/probe"),),
        entrypoint=("/bin/probe",),
    )


def test_the_same_files_give_the_same_image_id(tmp_path: Path) -> None:
    binary = tmp_path / "probe"
    binary.write_bytes(b"\x7fELF pretend")
    first = write_archive(image=_image(binary), path=tmp_path / "a.tar")
    second = write_archive(image=_image(binary), path=tmp_path / "b.tar")
    assert first == second
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    binary.write_bytes(b"\x7fELF changed")
    assert write_archive(image=_image(binary), path=tmp_path / "c.tar") != first


def test_the_archive_names_its_tag_layer_and_entrypoint_consistently(tmp_path: Path) -> None:
    binary = tmp_path / "probe"
    binary.write_bytes(b"program")
    image_id = write_archive(image=_image(binary), path=tmp_path / "image.tar")
    with tarfile.open(tmp_path / "image.tar") as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        (entry,) = manifest
        assert entry["RepoTags"] == ["checkpointed-jobs/probe:1"]
        config_bytes = tar.extractfile(entry["Config"]).read()  # type: ignore[union-attr]
        layer_bytes = tar.extractfile(entry["Layers"][0]).read()  # type: ignore[union-attr]
    assert image_id == "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    config = json.loads(config_bytes)
    assert config["config"]["Entrypoint"] == ["/bin/probe"]
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer_bytes).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(layer_bytes)) as layer:
        member = layer.getmember("bin/probe")
        assert member.mode == 0o755
        assert layer.extractfile(member).read() == b"program"  # type: ignore[union-attr]
        assert layer.getmember("bin").isdir()
