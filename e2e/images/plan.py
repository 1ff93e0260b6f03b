"""What the images are called, what their builds read, and where their archives go.

Everything here is pure and fast (reading and hashing a few hundred small files), so a
warm ``build_images`` call costs well under a second: it recomputes the keys, finds
the archives already in the cache and builds nothing.

Keys:
- the **base key** hashes ``docker/base/mkrootfs.sh``, ``docker/base/packages.txt``
  and the image configuration the builder gives the base; its first 12 hex digits
  are part of the base tag, so a changed base can never hide behind an old tag;
- an **image key** hashes the base key, the Dockerfile, ``.dockerignore`` and every
  context file its COPY instructions read (that includes ``pyproject.toml`` and
  ``constraints.txt``, hence every Python requirement);
- the **wheelhouse key** hashes ``pyproject.toml``, ``constraints.txt`` and the
  Python the wheels are for.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from e2e.images.context import DockerIgnore, context_files, hash_files
from e2e.images.dockerfile import arg_defaults, context_sources, parse_dockerfile

REPO = Path(__file__).resolve().parents[2]

#: Bump when the way images are built changes in a way the hashed files do not show.
RECIPE_VERSION = "1"

#: Repository part of every image name; the images are local, never pushed.
NAMESPACE = "checkpointed-jobs"
IMAGE_NAMES = ("operator", "runtime")
DEBIAN_SUITE = "bookworm"
PYTHON_VERSION = "3.11"
BASE_TAG_PREFIX = f"{DEBIAN_SUITE}-py{PYTHON_VERSION}-"

#: The image configuration of the base (what ``docker import --change`` sets).
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
BASE_CMD = ("bash",)
BASE_LABELS = {
    "org.opencontainers.image.title": "checkpointed-jobs base",
    "org.opencontainers.image.description": (
        f"Debian {DEBIAN_SUITE} minbase with Python {PYTHON_VERSION}, from Debian packages"
    ),
}
#: Label carrying the full base key, to tell which inputs made a base image.
BASE_KEY_LABEL = "io.checkpointed.base.inputs"


def cache_root() -> Path:
    """The project's cache root (``CJOB_CACHE_DIR`` overrides it), shared with the
    control plane build."""
    configured = os.environ.get("CJOB_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "checkpointed-jobs"


def project_version(*, repo: Path = REPO) -> str:
    """``[project].version`` of pyproject.toml: the images' tag (the chart's appVersion)."""
    with (repo / "pyproject.toml").open("rb") as f:
        version = tomllib.load(f)["project"]["version"]
    if not isinstance(version, str):
        raise ValueError("pyproject.toml: [project].version is not a string")
    return version


def image_requirements(*, repo: Path = REPO) -> list[str]:
    """Every requirement either image installs: the core dependencies, the ``runtime``
    and ``operator`` extras, and the build backend pip needs to build the project."""
    with (repo / "pyproject.toml").open("rb") as f:
        data = tomllib.load(f)
    project = data["project"]
    extras = project.get("optional-dependencies", {})
    requirements = [
        *project.get("dependencies", []),
        *extras.get("runtime", []),
        *extras.get("operator", []),
        *data.get("build-system", {}).get("requires", []),
    ]
    return list(dict.fromkeys(requirements))


def base_key(*, repo: Path = REPO) -> str:
    """SHA-256 of everything that makes the base image."""
    digest = hashlib.sha256()
    digest.update(f"base\0{RECIPE_VERSION}\0{DEBIAN_SUITE}\0".encode())
    for name in ("mkrootfs.sh", "packages.txt"):
        digest.update(name.encode() + b"\0")
        digest.update(hashlib.sha256((repo / "docker" / "base" / name).read_bytes()).digest())
    config = {"env": BASE_ENV, "cmd": list(BASE_CMD), "labels": BASE_LABELS}
    digest.update(json.dumps(config, sort_keys=True).encode())
    return digest.hexdigest()


def base_tag(key: str) -> str:
    """The base image reference for a base key, e.g.
    ``checkpointed-jobs/base:bookworm-py3.11-0123456789ab``."""
    return f"{NAMESPACE}/base:{BASE_TAG_PREFIX}{key[:12]}"


def dockerfile_path(name: str, *, repo: Path = REPO) -> Path:
    return repo / "docker" / f"{name}.Dockerfile"


def dockerfile_base_default(name: str, *, repo: Path = REPO) -> str | None:
    """The ``ARG BASE_IMAGE`` default a Dockerfile names (what ``docker build`` uses)."""
    return arg_defaults(parse_dockerfile(dockerfile_path(name, repo=repo))).get("BASE_IMAGE")


def image_key(name: str, *, base: str, repo: Path = REPO) -> str:
    """SHA-256 of everything the build of image ``name`` reads, on base key ``base``."""
    dockerfile = dockerfile_path(name, repo=repo)
    sources = context_sources(parse_dockerfile(dockerfile))
    ignore = DockerIgnore.load(repo)
    files = context_files(context=repo, sources=sources, ignore=ignore)
    digest = hashlib.sha256()
    digest.update(f"image\0{RECIPE_VERSION}\0{name}\0{base}\0".encode())
    digest.update(hashlib.sha256(dockerfile.read_bytes()).digest())
    dockerignore = repo / ".dockerignore"
    if dockerignore.is_file():
        digest.update(hashlib.sha256(dockerignore.read_bytes()).digest())
    digest.update(hash_files(context=repo, files=files).encode())
    return digest.hexdigest()


def wheelhouse_key(*, python_tag: str, platform_tag: str, repo: Path = REPO) -> str:
    """SHA-256 of what decides the wheelhouse: requirements, constraints, target Python."""
    digest = hashlib.sha256()
    digest.update(f"wheels\0{RECIPE_VERSION}\0{python_tag}\0{platform_tag}\0".encode())
    for name in ("pyproject.toml", "constraints.txt"):
        digest.update(hashlib.sha256((repo / name).read_bytes()).digest())
    return digest.hexdigest()


def archive_name(*, name: str, version: str, key: str) -> str:
    """File name of an image archive: image, version and the first 16 key digits."""
    return f"{name}-{version}-{key[:16]}.tar"


@dataclass(frozen=True)
class ImagePlan:
    """One image to have: its name, tag (``checkpointed-jobs/<name>:<version>``),
    Dockerfile, inputs key and archive path."""

    name: str
    tag: str
    dockerfile: Path
    key: str
    archive: Path


@dataclass(frozen=True)
class BuildPlan:
    """The base and both images, as the current tree defines them."""

    repo: Path
    images_dir: Path
    version: str
    base_key: str
    base_reference: str
    images: tuple[ImagePlan, ...]

    def image(self, name: str) -> ImagePlan:
        for plan in self.images:
            if plan.name == name:
                return plan
        raise KeyError(name)


def images_dir(*, cache: Path | None = None) -> Path:
    """Where the archives and the builder's own caches live."""
    return (cache if cache is not None else cache_root()) / "images"


def make_plan(*, repo: Path = REPO, cache: Path | None = None) -> BuildPlan:
    """Keys, references and archive paths for the tree at ``repo``."""
    version = project_version(repo=repo)
    bkey = base_key(repo=repo)
    folder = images_dir(cache=cache)
    plans = []
    for name in IMAGE_NAMES:
        key = image_key(name, base=bkey, repo=repo)
        plans.append(
            ImagePlan(
                name=name,
                tag=f"{NAMESPACE}/{name}:{version}",
                dockerfile=dockerfile_path(name, repo=repo),
                key=key,
                archive=folder / archive_name(name=name, version=version, key=key),
            )
        )
    return BuildPlan(
        repo=repo,
        images_dir=folder,
        version=version,
        base_key=bkey,
        base_reference=base_tag(bkey),
        images=tuple(plans),
    )


def stale_base_defaults(plan: BuildPlan) -> dict[str, str | None]:
    """Dockerfiles whose ``ARG BASE_IMAGE`` default is not the current base tag."""
    stale: dict[str, str | None] = {}
    for image in plan.images:
        default = dockerfile_base_default(image.name, repo=plan.repo)
        if default != plan.base_reference:
            stale[image.name] = default
    return stale
