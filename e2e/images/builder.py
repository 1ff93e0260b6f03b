"""Build the base, operator and runtime images without a Docker engine.

Docker is not needed to build OCI images: ``buildah`` builds the same Dockerfiles, and
its storage lives in the project cache. The steps, each skipped when its output for
the current inputs is already cached:

1. the base root filesystem: ``docker/base/mkrootfs.sh`` (debootstrap, Debian packages
   only), a tar archive under ``<cache>/images/base/``;
2. the base image, committed into buildah's storage from that tar archive;
3. a wheelhouse: every Python requirement as a wheel, made by the host's pip (which
   reuses its own cache) when the host Python and C library fit the image, so the
   builds install offline; otherwise pip in the build uses the package index;
4. ``buildah bud`` of each Dockerfile (the wheelhouse bind-mounted, the base named by
   ``--build-arg BASE_IMAGE``), a smoke check inside the result, and a docker-archive
   named with the short reference containerd normalises itself.

A Docker user gets the same base with ``--engine docker`` (``docker import`` of the
same tar archive); see docker/README.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from e2e.images.docker_archive import rewrite_names
from e2e.images.plan import (
    BASE_CMD,
    BASE_ENV,
    BASE_KEY_LABEL,
    BASE_LABELS,
    PYTHON_VERSION,
    REPO,
    BuildPlan,
    ImagePlan,
    image_requirements,
    make_plan,
    stale_base_defaults,
    wheelhouse_key,
)

Log = Callable[[str], None]

#: glibc of Debian bookworm: host wheels tagged for a newer glibc would not run there.
IMAGE_GLIBC = (2, 36)
#: Where the wheelhouse appears inside a build.
WHEELHOUSE_MOUNT = "/wheels"
#: The Dockerfiles' first stage: the virtualenv with every dependency, no project code.
DEPS_STAGE = "deps"
#: The sbin folders debootstrap, chroot and mount live in (not on every user's PATH).
SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")

#: Commands run inside each freshly built image; a build that fails one is an error.
SMOKE_CHECKS: dict[str, tuple[tuple[str, ...], ...]] = {
    "operator": (("python", "-c", "import boto3, cjob_operator, cjob_operator.handlers"),),
    "runtime": (
        ("python", "-c", "import boto3, job_runtime, pyarrow, pyspark"),
        ("java", "-version"),
        ("test", "-x", "/opt/cjob/entrypoint.sh"),
        ("test", "-x", "/usr/bin/tini"),
    ),
}
#: The user each image runs as (the chart and Spark's conventions rely on them).
EXPECTED_UID = {"operator": "10001", "runtime": "185"}


class ImageBuildError(RuntimeError):
    """An image could not be built; the message says which step failed and why."""


class MissingToolError(ImageBuildError):
    """A program the build needs is not installed."""


@dataclass(frozen=True)
class ImageArchive:
    """One built image: its tag (``checkpointed-jobs/runtime:0.1.0``, the name pods
    use), its docker-archive file and the key of the inputs it was built from."""

    name: str
    tag: str
    archive: Path
    key: str


@dataclass(frozen=True)
class BuiltImages:
    """The operator and runtime images, ready for ``ctr images import``."""

    runtime: ImageArchive
    operator: ImageArchive

    def all(self) -> tuple[ImageArchive, ...]:
        return (self.operator, self.runtime)


class _Clock:
    """Seconds since the build started, for progress lines."""

    def __init__(self, log: Log) -> None:
        self._start = time.monotonic()
        self._log = log

    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def say(self, message: str) -> None:
        self._log(f"[images {self.elapsed():6.1f}s] {message}")


def _which(name: str, *, hint: str, extra_dirs: Sequence[str] = ()) -> str:
    search = os.pathsep.join([os.environ.get("PATH", ""), *extra_dirs])
    found = shutil.which(name, path=search)
    if found is None:
        raise MissingToolError(f"{name} is not installed: {hint}")
    return found


def _tail(path: Path, lines: int = 40) -> str:
    with path.open(errors="replace") as f:
        return "".join(deque(f, maxlen=lines))


def _run_logged(
    argv: Sequence[str],
    *,
    log_file: Path,
    on_line: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Run ``argv``, writing its output to ``log_file`` and passing each line on."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("w") as out:
        out.write(f"$ {shlex.join(argv)}\n")
        out.flush()
        with subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=env,
            cwd=cwd,
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            return proc.wait()


def _failed(what: str, *, returncode: int, log_file: Path) -> ImageBuildError:
    return ImageBuildError(
        f"{what} failed with exit code {returncode}; its last lines:\n"
        f"{_tail(log_file)}\n(full output: {log_file})"
    )


@contextlib.contextmanager
def _locked(folder: Path, *, clock: _Clock) -> Iterator[None]:
    """One builder at a time per cache (parallel test sessions share it)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            clock.say("waiting for another image build on this cache to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _sbin_env() -> dict[str, str]:
    path = os.environ.get("PATH", "")
    missing = [d for d in SBIN if d not in path.split(os.pathsep)]
    return {**os.environ, "PATH": os.pathsep.join([path, *missing])}


# --- base root filesystem --------------------------------------------------------------


def rootfs_path(plan: BuildPlan) -> Path:
    return plan.images_dir / "base" / f"rootfs-{plan.base_key[:16]}.tar"


def ensure_rootfs(plan: BuildPlan, *, clock: _Clock) -> Path:
    """The base root filesystem tar archive, made by mkrootfs.sh when missing."""
    path = rootfs_path(plan)
    if path.is_file():
        clock.say(f"base root filesystem cached: {path.name}")
        return path
    if os.geteuid() != 0:
        raise ImageBuildError(
            "building the base root filesystem needs root (debootstrap and chroot); "
            "run the build as root once, later builds reuse the cached tar archive"
        )
    _which("debootstrap", hint="Debian/Ubuntu: apt-get install debootstrap", extra_dirs=SBIN)
    path.parent.mkdir(parents=True, exist_ok=True)
    script = plan.repo / "docker" / "base" / "mkrootfs.sh"
    clock.say("base root filesystem: debootstrap (takes a minute or two)")
    log_file = plan.images_dir / "logs" / f"rootfs-{plan.base_key[:16]}.log"
    returncode = _run_logged(
        ["bash", str(script), str(path)],
        log_file=log_file,
        on_line=lambda line: clock.say(line) if line.startswith("mkrootfs:") else None,
        env=_sbin_env(),
    )
    if returncode != 0:
        raise _failed("docker/base/mkrootfs.sh", returncode=returncode, log_file=log_file)
    for old in path.parent.glob("rootfs-*.tar"):
        if old != path:
            old.unlink(missing_ok=True)
    return path


# --- buildah ---------------------------------------------------------------------------


NO_NETWORK = ("--network", "none")
"""The smoke checks' containers need no network."""

BUILD_NETWORK = ("--network", "host")
"""The Dockerfiles' RUN steps use the host's network namespace: the runtime's step
installs Debian packages, so it needs the network, and buildah's default network would
turn on the host's IP forwarding and leave a ``cni-podman0`` bridge behind."""


@dataclass(frozen=True)
class Buildah:
    """buildah with the project's own storage (under the cache, not the system's)."""

    executable: str
    root: Path
    runroot: Path
    driver: str

    def argv(self, *args: str) -> list[str]:
        return [
            self.executable,
            "--root", str(self.root),
            "--runroot", str(self.runroot),
            "--storage-driver", self.driver,
            *args,
        ]  # fmt: skip

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.argv(*args), capture_output=True, text=True, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise ImageBuildError(
                f"buildah {shlex.join(args)} failed with exit code {proc.returncode}:\n"
                f"{proc.stderr.strip() or proc.stdout.strip()}"
            )
        return proc

    def run_in(self, container: str, *command: str,
               check: bool = True) -> subprocess.CompletedProcess[str]:
        """``command`` in ``container``, without a network (see ``NO_NETWORK``)."""
        return self.run("run", *NO_NETWORK, container, "--", *command, check=check)

    def image_exists(self, reference: str) -> bool:
        return self.run("inspect", "--type", "image", reference, check=False).returncode == 0


def _runroot(root: Path) -> Path:
    """buildah's run-time state: a folder that does not outlive a reboot, one per storage."""
    candidates = [os.environ.get("XDG_RUNTIME_DIR"), "/run" if os.geteuid() == 0 else None]
    base = next(
        (Path(c) for c in candidates if c and os.access(c, os.W_OK)),
        Path(tempfile.gettempdir()),
    )
    suffix = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
    return base / "checkpointed-jobs" / f"buildah-{suffix}"


def make_buildah(plan: BuildPlan) -> Buildah:
    """buildah on the storage driver ``CJOB_BUILDAH_STORAGE_DRIVER`` (default overlay;
    vfs works everywhere but copies every layer in full)."""
    executable = _which("buildah", hint="Debian/Ubuntu: apt-get install buildah")
    driver = os.environ.get("CJOB_BUILDAH_STORAGE_DRIVER", "overlay")
    root = plan.images_dir / f"storage-{driver}"
    return Buildah(executable=executable, root=root, runroot=_runroot(root), driver=driver)


def ensure_base_buildah(plan: BuildPlan, *, buildah: Buildah, clock: _Clock) -> None:
    """The base image in buildah's storage, committed from the root filesystem."""
    if buildah.image_exists(plan.base_reference):
        clock.say(f"base image present: {plan.base_reference}")
        return
    rootfs = ensure_rootfs(plan, clock=clock)
    clock.say(f"base image: committing {plan.base_reference}")
    container = buildah.run("from", "scratch").stdout.strip()
    try:
        mountpoint = buildah.run("mount", container).stdout.strip()
        try:
            subprocess.run(
                ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=security.capability",
                 "-xf", str(rootfs), "-C", mountpoint],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
        except subprocess.CalledProcessError as exc:
            raise ImageBuildError(f"unpacking {rootfs} failed:\n{exc.stderr}") from exc
        finally:
            buildah.run("umount", container, check=False)
        config: list[str] = []
        for name, value in BASE_ENV.items():
            config += ["--env", f"{name}={value}"]
        for name, value in {**BASE_LABELS, BASE_KEY_LABEL: plan.base_key}.items():
            config += ["--label", f"{name}={value}"]
        config += ["--cmd", "[" + ", ".join(f'"{word}"' for word in BASE_CMD) + "]"]
        buildah.run("config", *config, container)
        buildah.run("commit", "--quiet", container, plan.base_reference)
    finally:
        buildah.run("rm", container, check=False)


# --- wheelhouse --------------------------------------------------------------------------


def wheelhouse_unusable_reason() -> str | None:
    """Why this Python cannot make wheels for the images, or None when it can."""
    if sys.platform != "linux":
        return f"the host is {sys.platform}, not Linux"
    if f"{sys.version_info.major}.{sys.version_info.minor}" != PYTHON_VERSION:
        return f"the host Python is {platform.python_version()}, the images' is {PYTHON_VERSION}"
    libc, version = platform.libc_ver()
    if libc != "glibc":
        return "the host C library is not glibc"
    try:
        glibc = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return f"unknown glibc version {version!r}"
    if glibc > IMAGE_GLIBC:
        return f"the host glibc {version} is newer than the images' 2.36"
    if importlib.util.find_spec("pip") is None:
        return f"{sys.executable} has no pip"
    return None


def ensure_wheelhouse(plan: BuildPlan, *, clock: _Clock) -> Path | None:
    """A folder with a wheel for every requirement of both images, or None."""
    reason = wheelhouse_unusable_reason()
    if reason is not None:
        clock.say(f"no wheelhouse ({reason}): pip in the build downloads from the index")
        return None
    key = wheelhouse_key(
        python_tag=f"cp{PYTHON_VERSION.replace('.', '')}",
        platform_tag=f"{platform.machine()}-glibc{'.'.join(map(str, IMAGE_GLIBC))}",
        repo=plan.repo,
    )
    root = plan.images_dir / "wheels"
    folder = root / key[:16]
    if folder.is_dir():
        clock.say(f"wheelhouse cached: wheels/{folder.name}")
        return folder
    partial = root / f".{folder.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    clock.say("wheelhouse: pip wheel (reuses the host's pip cache)")
    log_file = plan.images_dir / "logs" / f"wheels-{key[:16]}.log"
    argv = [
        sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check",
        "--wheel-dir", str(partial), "--constraint", str(plan.repo / "constraints.txt"),
        *image_requirements(repo=plan.repo),
    ]  # fmt: skip
    returncode = _run_logged(argv, log_file=log_file)
    if returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise _failed(
            "pip wheel (the build's wheelhouse)", returncode=returncode, log_file=log_file
        )
    partial.rename(folder)
    for old in root.iterdir():
        if old != folder and old.is_dir() and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    count = sum(1 for _ in folder.glob("*.whl"))
    clock.say(f"wheelhouse: {count} wheels in wheels/{folder.name}")
    return folder


# --- images ------------------------------------------------------------------------------


def _smoke_check(image: ImagePlan, image_id: str, *, buildah: Buildah, clock: _Clock) -> None:
    """Run the image's smoke checks in a container of the new image."""
    container = buildah.run("from", "--pull-never", image_id).stdout.strip()
    try:
        uid = buildah.run_in(container, "id", "-u").stdout.strip()
        if uid != EXPECTED_UID[image.name]:
            raise ImageBuildError(
                f"{image.name}: runs as uid {uid}, expected {EXPECTED_UID[image.name]}"
            )
        for command in SMOKE_CHECKS[image.name]:
            proc = buildah.run_in(container, *command, check=False)
            if proc.returncode != 0:
                raise ImageBuildError(
                    f"{image.name}: smoke check `{shlex.join(command)}` failed with exit code "
                    f"{proc.returncode}:\n{(proc.stderr + proc.stdout).strip()}"
                )
    finally:
        buildah.run("rm", container, check=False)
    clock.say(f"{image.name}: smoke checks passed (uid {uid})")


def deps_stage_tag(image: ImagePlan) -> str:
    """Tag of an image's dependency stage in buildah's storage (never exported)."""
    repository, _, version = image.tag.rpartition(":")
    return f"{repository}-deps:{version}"


def bud_args(image: ImagePlan, *, plan: BuildPlan, wheelhouse: Path | None) -> list[str]:
    """The ``buildah bud`` arguments both stages of an image share."""
    args = [
        "bud", "--layers", "--pull-never", *BUILD_NETWORK,
        "--file", str(image.dockerfile),
        "--build-arg", f"BASE_IMAGE={plan.base_reference}",
    ]  # fmt: skip
    if wheelhouse is not None:
        args += [
            "--build-arg", f"WHEELHOUSE={WHEELHOUSE_MOUNT}",
            "--volume", f"{wheelhouse}:{WHEELHOUSE_MOUNT}:ro",
        ]  # fmt: skip
    return args


def build_image(
    image: ImagePlan,
    *,
    plan: BuildPlan,
    buildah: Buildah,
    wheelhouse: Path | None,
    clock: _Clock,
) -> None:
    """``buildah bud`` one Dockerfile, check the image and write its archive."""
    logs = plan.images_dir / "logs"
    iidfile = logs / f".{image.name}.iid"
    iidfile.unlink(missing_ok=True)
    common = bud_args(image, plan=plan, wheelhouse=wheelhouse)
    # The dependency stage first, under a tag of its own: pruning keeps tagged images,
    # so its big pip layer stays in the layer cache for the next build.
    stage = buildah.argv(*common, "--target", DEPS_STAGE, "--tag", deps_stage_tag(image))
    final = buildah.argv(*common, "--iidfile", str(iidfile), "--tag", image.tag)
    clock.say(f"{image.name}: buildah bud {image.dockerfile.relative_to(plan.repo)}")

    def on_line(line: str) -> None:
        # "STEP 4/9: COPY ..." or "[2/3] STEP 4/9: RUN ...": the steps that do work
        _, step, instruction = f" {line}".partition(" STEP ")
        if step and instruction.partition(": ")[2].startswith(("RUN ", "COPY ")):
            clock.say(f"{image.name}: {line[:110]}")

    for part, argv in (("deps", stage), ("image", final)):
        log_file = logs / f"{image.name}-{image.key[:16]}-{part}.log"
        returncode = _run_logged(
            [*argv, str(plan.repo)], log_file=log_file, on_line=on_line, cwd=plan.repo
        )
        if returncode != 0:
            raise _failed(f"buildah bud of {image.name}", returncode=returncode, log_file=log_file)
    image_id = iidfile.read_text().strip()
    iidfile.unlink(missing_ok=True)
    _smoke_check(image, image_id, buildah=buildah, clock=clock)

    raw = plan.images_dir / f".{image.archive.name}.buildah"
    raw.unlink(missing_ok=True)
    try:
        buildah.run("push", "--quiet", image_id, f"docker-archive:{raw}:{image.tag}")
        rewrite_names(source=raw, destination=image.archive, reference=image.tag)
    except (OSError, ValueError, tarfile.TarError) as exc:
        raise ImageBuildError(f"{image.name}: writing {image.archive} failed: {exc}") from exc
    finally:
        raw.unlink(missing_ok=True)
    size = image.archive.stat().st_size / 1e6
    clock.say(f"{image.name}: wrote {image.archive.name} ({size:.0f} MB)")
    _drop_old_archives(image, plan=plan)


def _drop_old_archives(image: ImagePlan, *, plan: BuildPlan) -> None:
    """Delete all but the newest older archive of the image: another process (a test
    session on another tree) may have been handed that one and not imported it yet."""
    older = sorted(
        (p for p in plan.images_dir.glob(f"{image.name}-*.tar") if p != image.archive),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in older[1:]:
        old.unlink(missing_ok=True)


#: Build logs older than this are deleted (each build writes a few small files).
LOG_RETENTION_SECONDS = 7 * 24 * 3600


def _prune(plan: BuildPlan, *, buildah: Buildah) -> None:
    """Drop what no current image needs: build stages, replaced images, old bases,
    old logs. The tagged dependency stages stay, and so does their layer cache.
    """
    cutoff = time.time() - LOG_RETENTION_SECONDS
    for log_file in (plan.images_dir / "logs").glob("*.log"):
        if log_file.stat().st_mtime < cutoff:
            log_file.unlink(missing_ok=True)
    buildah.run("rmi", "--prune", check=False)
    listing = buildah.run("images", "--format", "{{.Name}}:{{.Tag}}", check=False).stdout
    current = plan.base_reference.split("/", 1)[1]
    for name in listing.split():
        if "/base:" in name and not name.endswith(current):
            buildah.run("rmi", name, check=False)
    buildah.run("rmi", "--prune", check=False)


def _check_dockerfiles(plan: BuildPlan) -> None:
    stale = stale_base_defaults(plan)
    if stale:
        names = ", ".join(f"docker/{n}.Dockerfile ({v})" for n, v in stale.items())
        raise ImageBuildError(
            f"the base image inputs (docker/base/) now make {plan.base_reference}, but {names} "
            f"name another base: set `ARG BASE_IMAGE={plan.base_reference}` in both Dockerfiles"
        )


def _built(plan: BuildPlan) -> BuiltImages:
    def archive(name: str) -> ImageArchive:
        image = plan.image(name)
        return ImageArchive(name=name, tag=image.tag, archive=image.archive, key=image.key)

    return BuiltImages(runtime=archive("runtime"), operator=archive("operator"))


def build_images(
    *,
    log: Log,
    repo: Path = REPO,
    cache: Path | None = None,
    force: bool = False,
) -> BuiltImages:
    """The operator and runtime images as docker-archives, built only when their inputs
    changed since the archives in the cache were written.

    ``log`` receives progress lines with elapsed seconds. ``cache`` defaults to
    ``CJOB_CACHE_DIR`` or ``~/.cache/checkpointed-jobs``; archives go to its
    ``images/`` folder. ``force`` rebuilds the images (not the base or the wheelhouse).
    Raises :class:`ImageBuildError` (or :class:`MissingToolError`) with the failing
    step and the tail of its output.
    """
    clock = _Clock(log)
    plan = make_plan(repo=repo, cache=cache)
    _check_dockerfiles(plan)
    missing = [i for i in plan.images if force or not i.archive.is_file()]
    if not missing:
        clock.say("images up to date: " + ", ".join(i.archive.name for i in plan.images))
        return _built(plan)
    with _locked(plan.images_dir, clock=clock):
        missing = [i for i in plan.images if force or not i.archive.is_file()]
        if missing:
            buildah = make_buildah(plan)
            clock.say(f"building {', '.join(i.name for i in missing)} ({buildah.driver} storage)")
            # Working containers an interrupted build left behind would pin old layers;
            # the storage is this builder's own, and the lock is held.
            buildah.run("rm", "--all", check=False)
            ensure_base_buildah(plan, buildah=buildah, clock=clock)
            wheelhouse = ensure_wheelhouse(plan, clock=clock)
            for image in missing:
                build_image(image, plan=plan, buildah=buildah, wheelhouse=wheelhouse, clock=clock)
            _prune(plan, buildah=buildah)
        clock.say("images ready: " + ", ".join(i.archive.name for i in plan.images))
    return _built(plan)


def build_base(*, log: Log, repo: Path = REPO, cache: Path | None = None) -> str:
    """Only the base image, in buildah's storage; returns its reference."""
    clock = _Clock(log)
    plan = make_plan(repo=repo, cache=cache)
    with _locked(plan.images_dir, clock=clock):
        ensure_base_buildah(plan, buildah=make_buildah(plan), clock=clock)
    return plan.base_reference


# --- Docker ------------------------------------------------------------------------------


def build_with_docker(
    *,
    log: Log,
    repo: Path = REPO,
    cache: Path | None = None,
    base_only: bool = False,
    env: Mapping[str, str] | None = None,
) -> None:
    """The base (``docker import`` of the same root filesystem) and, unless
    ``base_only``, both images with ``docker build``, into the local Docker engine
    (the one ``env``'s ``DOCKER_HOST`` names, when given)."""
    clock = _Clock(log)
    plan = make_plan(repo=repo, cache=cache)
    _check_dockerfiles(plan)
    docker = _which("docker", hint="install Docker, or build with buildah (the default)")
    engine = subprocess.run(
        [docker, "version", "--format", "{{.Server.Version}}"],
        capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    if engine.returncode != 0:
        raise ImageBuildError(
            f"the Docker engine does not answer ({(engine.stderr or engine.stdout).strip()}); "
            "start it, or build without Docker (the default engine, buildah)"
        )
    present = subprocess.run(
        [docker, "image", "inspect", plan.base_reference],
        capture_output=True, check=False, stdin=subprocess.DEVNULL, env=env,
    ).returncode == 0  # fmt: skip
    if present:
        clock.say(f"base image present in Docker: {plan.base_reference}")
    else:
        with _locked(plan.images_dir, clock=clock):
            rootfs = ensure_rootfs(plan, clock=clock)
        changes: list[str] = []
        for name, value in BASE_ENV.items():
            changes += ["--change", f"ENV {name}={value}"]
        for name, value in {**BASE_LABELS, BASE_KEY_LABEL: plan.base_key}.items():
            changes += ["--change", f'LABEL {name}="{value}"']
        changes += ["--change", "CMD [" + ", ".join(f'"{w}"' for w in BASE_CMD) + "]"]
        clock.say(f"docker import {rootfs.name} as {plan.base_reference}")
        imported = subprocess.run(
            [docker, "import", *changes, str(rootfs), plan.base_reference],
            check=False, stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        if imported.returncode != 0:
            raise ImageBuildError(f"docker import of {rootfs} failed ({imported.returncode})")
    if base_only:
        return
    for image in plan.images:
        clock.say(f"{image.name}: docker build {image.dockerfile.relative_to(plan.repo)}")
        proc = subprocess.run(
            [docker, "build", "--file", str(image.dockerfile),
             "--build-arg", f"BASE_IMAGE={plan.base_reference}",
             "--tag", image.tag, str(plan.repo)],
            check=False, stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        if proc.returncode != 0:
            raise ImageBuildError(f"docker build of {image.name} failed ({proc.returncode})")
        clock.say(f"{image.name}: {image.tag} built")
