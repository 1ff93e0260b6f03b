"""Jars pinned in a pom, fetched once by Maven into the project's cache.

The harness runs several things from Maven Central's jars (the Kafka broker,
Structured Streaming's Kafka connector, the Delta and Iceberg readers of another
Spark): each pins its versions in a ``pom.xml`` of its own, and this module turns
one into a folder of jars. Maven resolves the pom in a scratch folder beside the
cache entry and copies the jars there; the folder is moved into place whole, after a
marker holding a hash of the pom is written. A folder without the marker (an
interrupted fetch) or with another hash (the pom changed) is fetched again; one with
it is used without running Maven at all, so only the first run pays for the download
and needs ``mvn``. A lock keeps two concurrent callers (two make targets, two test
workers) from fetching twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

MARKER = ".complete"


class MissingToolError(RuntimeError):
    """Raised when ``java`` or ``mvn`` is not installed; the message says what to install."""

    def __init__(self, *, tool: str, package: str, needed_for: str) -> None:
        self.tool = tool
        self.package = package
        super().__init__(
            f"`{tool}` not found on PATH; it is needed {needed_for}: "
            f"install it (Debian package `{package}`)"
        )


class FetchFailedError(RuntimeError):
    """Raised when Maven cannot resolve a pom's jars; carries the tail of its output."""

    def __init__(self, *, what: str, returncode: int, output_tail: str) -> None:
        self.returncode = returncode
        self.output_tail = output_tail
        super().__init__(
            f"Maven could not fetch {what} (exit code {returncode}):\n{output_tail}"
        )


def cache_root() -> Path:
    """The project's cache root (``CJOB_CACHE_DIR`` overrides it), as ``build.sh`` uses."""
    configured = os.environ.get("CJOB_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "checkpointed-jobs"


def pom_digest(pom: Path) -> str:
    """The hash a finished folder's marker holds: a changed pom is fetched again."""
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def is_complete(folder: Path, *, pom: Path) -> bool:
    """Whether ``folder`` holds a finished fetch of this very pom."""
    try:
        return (folder / MARKER).read_text().strip() == pom_digest(pom)
    except OSError:
        return False


def fetch_jars(*, pom: Path, target: Path, what: str, transitive: bool = True) -> Path:
    """``target``, holding the jars of ``pom`` (``what`` names them in errors), fetched
    by Maven first unless a finished fetch of this pom is there. ``transitive=False``
    copies only the pom's own dependencies, for jars laid beside a distribution that
    brings the rest (Spark's own jars)."""
    if is_complete(target, pom=pom):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MissingToolError(tool="mvn", package="maven", needed_for=f"once, to fetch {what}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / ".lock"):
        if is_complete(target, pom=pom):
            return target
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            _run_maven(mvn=mvn, pom=pom, scratch=scratch, what=what, transitive=transitive)
            (scratch / "jars" / MARKER).write_text(pom_digest(pom) + "\n")
            shutil.rmtree(target, ignore_errors=True)
            (scratch / "jars").rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return target


def classpath(folder: Path) -> str:
    """The ``java -cp`` value for every jar in ``folder``, in a stable order."""
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise FileNotFoundError(f"no jars in {folder}")
    return os.pathsep.join(str(j) for j in jars)


def _run_maven(*, mvn: str, pom: Path, scratch: Path, what: str, transitive: bool) -> None:
    # A copy of the pom in the scratch folder keeps Maven from writing into the repo.
    shutil.copyfile(pom, scratch / "pom.xml")
    argv = [
        mvn, "-q", "-B", "-f", str(scratch / "pom.xml"),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={scratch / 'jars'}",
        "-DincludeScope=runtime",
        f"-DexcludeTransitive={'false' if transitive else 'true'}",
    ]  # fmt: skip
    proc = subprocess.run(
        argv,
        cwd=scratch,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not any((scratch / "jars").glob("*.jar")):
        tail = "\n".join(proc.stdout.splitlines()[-20:])
        raise FetchFailedError(what=what, returncode=proc.returncode, output_tail=tail)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
