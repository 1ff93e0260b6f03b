"""The image builder's pure parts (``e2e.images``), without buildah or containerd: the
inputs keys change exactly when something a build reads changes, archives are named
and tagged as containerd expects, a warm call builds nothing, and the ctr import
command is what containerd needs. The builds themselves run in the end-to-end
fixtures (they take minutes)."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from paths import REPO

from e2e.images import BuiltImages, ImageImportError, build_images, import_images, make_plan
from e2e.images.builder import ImageArchive
from e2e.images.containerd import import_command
from e2e.images.context import DockerIgnore, context_files
from e2e.images.docker_archive import read_repo_tags, rewrite_names
from e2e.images.dockerfile import Instruction, context_sources, copy_sources
from e2e.images.plan import (
    archive_name,
    base_key,
    cache_root,
    stale_base_defaults,
    wheelhouse_key,
)

#: What a build of either image reads: the Dockerfiles' COPY sources and the base.
TREE = (
    "pyproject.toml", "README.md", "constraints.txt", ".dockerignore", "docker",
    "cjob_spec", "cjob_checkpoint", "cjob_lifecycle", "job_runtime", "cjob", "operator", "examples",
)  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the parts of the repository the images are built from."""
    root = tmp_path / "repo"
    root.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache")
    for name in TREE:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=ignore, symlinks=True)
        else:
            shutil.copy2(source, root / name)
    return root


def keys(repo: Path) -> dict[str, str]:
    plan = make_plan(repo=repo, cache=repo / "cache")
    return {"base": plan.base_key, **{i.name: i.key for i in plan.images}}


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


# --- inputs keys -----------------------------------------------------------------------


def test_the_keys_are_deterministic_and_independent_of_where_the_tree_is(
    tree: Path, tmp_path: Path
) -> None:
    moved = tmp_path / "elsewhere"
    shutil.copytree(tree, moved, symlinks=True)
    assert keys(tree) == keys(tree) == keys(moved)


def test_a_changed_dockerfile_rebuilds_that_image_only(tree: Path) -> None:
    before = keys(tree)
    append(tree / "docker" / "runtime.Dockerfile", "# a comment is an input too\n")
    after = keys(tree)
    assert after["runtime"] != before["runtime"]
    assert after["operator"] == before["operator"]
    assert after["base"] == before["base"]


def test_changed_source_code_rebuilds_both_images(tree: Path) -> None:
    before = keys(tree)
    append(tree / "job_runtime" / "__init__.py", "\n# changed\n")
    after = keys(tree)
    assert after["runtime"] != before["runtime"]
    assert after["operator"] != before["operator"]


def test_a_file_only_the_runtime_copies_rebuilds_the_runtime_only(tree: Path) -> None:
    before = keys(tree)
    (tree / "examples" / "new_example.py").write_text("x = 1\n")
    after = keys(tree)
    assert after["runtime"] != before["runtime"]
    assert after["operator"] == before["operator"]


def test_constraints_and_requirements_are_inputs(tree: Path) -> None:
    before = keys(tree)
    append(tree / "constraints.txt", "six==1.17.0\n")
    after = keys(tree)
    assert after["runtime"] != before["runtime"]
    assert after["operator"] != before["operator"]


def test_the_executable_bit_is_an_input(tree: Path) -> None:
    before = keys(tree)
    (tree / "docker" / "spark-entrypoint.sh").chmod(0o644)
    assert keys(tree)["runtime"] != before["runtime"]


def test_timestamps_ignored_files_and_caches_are_not_inputs(tree: Path) -> None:
    before = keys(tree)
    init = tree / "job_runtime" / "__init__.py"
    init.touch()
    pycache = tree / "job_runtime" / "__pycache__"
    pycache.mkdir(exist_ok=True)
    (pycache / "x.cpython-311.pyc").write_bytes(b"\0")
    (tree / "tests").mkdir()
    (tree / "tests" / "test_x.py").write_text("")
    (tree / "job_runtime" / ".pytest_cache").mkdir()
    (tree / "job_runtime" / ".pytest_cache" / "v").write_text("")
    (tree / "notes.txt").write_text("not in the build context\n")
    assert keys(tree) == before


def test_a_changed_debian_package_list_changes_the_base_tag_and_every_image(tree: Path) -> None:
    before = make_plan(repo=tree, cache=tree / "cache")
    assert stale_base_defaults(before) == {}
    append(tree / "docker" / "base" / "packages.txt", "tzdata\n")
    after = make_plan(repo=tree, cache=tree / "cache")
    assert after.base_key != before.base_key
    assert after.base_reference != before.base_reference
    assert all(a.key != b.key for a, b in zip(after.images, before.images, strict=True))
    # the Dockerfiles still name the old base: the builder and the tests say so
    assert stale_base_defaults(after) == {
        "operator": before.base_reference,
        "runtime": before.base_reference,
    }


def test_the_base_key_covers_the_rootfs_script(tree: Path) -> None:
    before = base_key(repo=tree)
    append(tree / "docker" / "base" / "mkrootfs.sh", "# changed\n")
    assert base_key(repo=tree) != before


def test_the_wheelhouse_key_follows_requirements_and_the_target_python(tree: Path) -> None:
    def key(python: str = "cp311") -> str:
        return wheelhouse_key(python_tag=python, platform_tag="x86_64-glibc2.36", repo=tree)

    before = key()
    assert key("cp312") != before
    append(tree / "pyproject.toml", "\n# changed\n")
    assert key() != before


# --- names -------------------------------------------------------------------------------


def test_archives_are_named_by_image_version_and_key(tmp_path: Path) -> None:
    assert archive_name(name="runtime", version="0.1.0", key="ab" * 32) == (
        "runtime-0.1.0-abababababababab.tar"
    )
    plan = make_plan(cache=tmp_path)
    for image in plan.images:
        assert image.tag == f"checkpointed-jobs/{image.name}:{plan.version}"
        assert image.archive.parent == tmp_path / "images"
        assert image.archive.name == f"{image.name}-{plan.version}-{image.key[:16]}.tar"


def test_the_tag_is_the_project_version_and_the_charts_app_version() -> None:
    import yaml

    chart = yaml.safe_load((REPO / "charts/checkpointed-jobs/Chart.yaml").read_text())
    plan = make_plan()
    assert plan.version == str(chart["appVersion"])


def test_the_cache_root_follows_cjob_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CJOB_CACHE_DIR", str(tmp_path))
    assert cache_root() == tmp_path
    assert make_plan().images_dir == tmp_path / "images"
    monkeypatch.delenv("CJOB_CACHE_DIR")
    assert cache_root() == Path.home() / ".cache" / "checkpointed-jobs"


# --- Dockerfile and .dockerignore reading ------------------------------------------------


def test_copy_sources_skip_other_stages_and_flags() -> None:
    def sources(arguments: str) -> list[str]:
        return copy_sources(Instruction("COPY", arguments, 1))

    assert sources("--from=build /opt/venv /opt/venv") == []
    assert sources("--chmod=0755 docker/a.sh /opt/a.sh") == ["docker/a.sh"]
    assert sources("pyproject.toml README.md ./") == ["pyproject.toml", "README.md"]
    assert sources('["a b", "c", "/dst/"]') == ["a b", "c"]
    assert sources('--chown=1:1 ["x", "/y"]') == ["x"]


def test_the_runtime_dockerfile_copies_the_examples_and_the_entrypoint() -> None:
    from e2e.images.dockerfile import parse_dockerfile

    sources = context_sources(parse_dockerfile(REPO / "docker" / "runtime.Dockerfile"))
    assert "examples/" in sources and "docker/spark-entrypoint.sh" in sources
    assert sources.count("pyproject.toml") == 1


def test_dockerignore_allow_lists_and_re_excludes() -> None:
    ignore = DockerIgnore.parse("*\n!src/\n!keep.txt\n**/__pycache__\nsrc/secret?.env\n")
    assert ignore.includes("src/a/b.py")
    assert ignore.includes("keep.txt")
    assert not ignore.includes("other.txt")
    assert not ignore.includes(".venv/bin/python")
    assert not ignore.includes("src/a/__pycache__/b.pyc")
    assert not ignore.includes("src/secret1.env")
    assert ignore.includes("src/secret10.env")


def test_a_missing_copy_source_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nothing/"):
        context_files(context=tmp_path, sources=["nothing/"], ignore=DockerIgnore(()))


# --- archives ------------------------------------------------------------------------------


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _fake_docker_archive(path: Path, *, repo_tags: list[str]) -> bytes:
    layer = b"layer bytes " * 1000
    with tarfile.open(path, "w") as tar:
        _add(tar, "aaaa.tar", layer)
        _add(tar, "cfg.json", b"{}")
        link = tarfile.TarInfo("legacy/layer.tar")
        link.type = tarfile.SYMTYPE
        link.linkname = "../aaaa.tar"
        tar.addfile(link)
        manifest = [{"Config": "cfg.json", "RepoTags": repo_tags, "Layers": ["aaaa.tar"]}]
        _add(tar, "manifest.json", json.dumps(manifest).encode())
        repositories = {t.rpartition(":")[0]: {t.rpartition(":")[2]: "legacy"} for t in repo_tags}
        _add(tar, "repositories", json.dumps(repositories).encode())
    return layer


def test_the_archive_names_exactly_one_short_tag(tmp_path: Path) -> None:
    raw = tmp_path / "raw.tar"
    layer = _fake_docker_archive(
        raw, repo_tags=["somewhere/checkpointed-jobs/runtime:0.1.0", "local/x:0.1.0"]
    )
    final = tmp_path / "runtime.tar"
    rewrite_names(source=raw, destination=final, reference="checkpointed-jobs/runtime:0.1.0")
    assert read_repo_tags(final) == ["checkpointed-jobs/runtime:0.1.0"]
    with tarfile.open(final) as tar:
        names = tar.getnames()
        member = tar.extractfile("aaaa.tar")
        assert member is not None and member.read() == layer
        assert tar.getmember("legacy/layer.tar").issym()
        repositories = tar.extractfile("repositories")
        assert repositories is not None
        assert json.load(repositories) == {"checkpointed-jobs/runtime": {"0.1.0": "legacy"}}
    assert names == ["aaaa.tar", "cfg.json", "legacy/layer.tar", "manifest.json", "repositories"]
    assert not list(tmp_path.glob("*.partial"))


def test_a_tar_without_a_manifest_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    raw = tmp_path / "raw.tar"
    with tarfile.open(raw, "w") as tar:
        _add(tar, "x", b"x")
    final = tmp_path / "out.tar"
    with pytest.raises(ValueError, match=r"manifest\.json"):
        rewrite_names(source=raw, destination=final, reference="a/b:1")
    assert not final.exists() and not list(tmp_path.glob("*.partial"))


# --- warm builds and imports ---------------------------------------------------------------


def test_a_warm_call_builds_nothing_and_needs_no_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = make_plan(cache=tmp_path)
    for image in plan.images:
        image.archive.parent.mkdir(parents=True, exist_ok=True)
        image.archive.write_bytes(b"cached")

    def no_tools(*args: object, **kwargs: object) -> None:
        raise AssertionError("a warm call must not look for buildah or run anything")

    monkeypatch.setattr(shutil, "which", no_tools)
    monkeypatch.setattr("subprocess.run", no_tools)
    monkeypatch.setattr("subprocess.Popen", no_tools)
    lines: list[str] = []
    built = build_images(log=lines.append, cache=tmp_path)
    assert built.runtime.archive == plan.image("runtime").archive
    assert built.operator.tag == "checkpointed-jobs/operator:" + plan.version
    assert lines and "up to date" in lines[-1] and lines[-1].startswith("[images")


def _built(tmp_path: Path) -> BuiltImages:
    def image(name: str) -> ImageArchive:
        archive = tmp_path / f"{name}.tar"
        archive.write_bytes(b"")
        return ImageArchive(
            name=name, tag=f"checkpointed-jobs/{name}:0.1.0", archive=archive, key="k"
        )

    return BuiltImages(runtime=image("runtime"), operator=image("operator"))


def test_import_runs_ctr_against_the_given_socket_and_namespace(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    ctr = tmp_path / "ctr"
    ctr.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    ctr.chmod(0o755)
    images = _built(tmp_path)
    import_images(ctr=ctr, address=tmp_path / "containerd.sock", images=images)
    sock = tmp_path / "containerd.sock"
    assert calls.read_text().splitlines() == [
        f"--address {sock} --namespace k8s.io images import {images.operator.archive}",
        f"--address {sock} --namespace k8s.io images import {images.runtime.archive}",
    ]
    argv = import_command(
        ctr=ctr, address=sock, archive=images.runtime.archive, snapshotter="native"
    )
    assert argv[-3:] == ["--snapshotter", "native", str(images.runtime.archive)]


def test_a_failed_import_says_which_command_and_why(tmp_path: Path) -> None:
    ctr = tmp_path / "ctr"
    ctr.write_text('#!/bin/sh\necho "ctr: connection refused" >&2\nexit 1\n')
    ctr.chmod(0o755)
    with pytest.raises(ImageImportError, match="connection refused") as info:
        import_images(ctr=ctr, address=tmp_path / "sock", images=_built(tmp_path))
    assert "images import" in str(info.value)
