"""The Apache Kafka jars the broker runs from, fetched once by Maven into a cache.

The versions are pinned in ``pom.xml`` beside this file; Maven resolves it with its
runtime dependencies and copies the jars into
``${CJOB_CACHE_DIR:-~/.cache/checkpointed-jobs}/kafka/<version>/``. A marker file,
written after the last jar, holds a hash of the pom: a folder without it (an
interrupted fetch) or with another hash (the pom changed) is fetched again, and a
folder with it is used without running Maven at all, so only the first run pays for
the download and needs ``mvn``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
MARKER = ".complete"
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


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
    """Raised when Maven cannot resolve the pinned jars; carries the tail of its output."""

    def __init__(self, *, returncode: int, output_tail: str) -> None:
        self.returncode = returncode
        self.output_tail = output_tail
        super().__init__(
            f"Maven could not fetch the Kafka jars (exit code {returncode}):\n{output_tail}"
        )


def kafka_version(*, pom: Path = POM) -> str:
    """The Kafka version pinned in ``pom.xml`` (its ``kafka.version`` property)."""
    node = ET.parse(pom).getroot().find("m:properties/m:kafka.version", _POM_NS)
    if node is None or not (node.text or "").strip():
        raise ValueError(f"{pom} has no <kafka.version> property")
    return (node.text or "").strip()


def cache_root() -> Path:
    """The project's cache root (``CJOB_CACHE_DIR`` overrides it), as ``build.sh`` uses."""
    configured = os.environ.get("CJOB_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "checkpointed-jobs"


def jar_dir(*, pom: Path = POM) -> Path:
    """Where the jars of the pinned version live once fetched."""
    return cache_root() / "kafka" / kafka_version(pom=pom)


def require_java() -> str:
    """The path of ``java``, or :class:`MissingToolError`."""
    java = shutil.which("java")
    if java is None:
        raise MissingToolError(
            tool="java", package="openjdk-17-jre-headless", needed_for="to run the Kafka broker"
        )
    return java


def is_complete(folder: Path, *, pom: Path = POM) -> bool:
    """Whether ``folder`` holds a finished fetch of this very pom."""
    try:
        return (folder / MARKER).read_text().strip() == _pom_digest(pom)
    except OSError:
        return False


def ensure_jars(*, pom: Path = POM) -> Path:
    """The folder of the pinned Kafka jars, fetching them with Maven first if need be.

    Maven runs in a scratch folder beside the cache entry, so an interrupted run leaves
    only scratch; the finished folder is moved into place whole, after its marker is
    written. A lock keeps two concurrent callers from fetching twice.
    """
    target = jar_dir(pom=pom)
    if is_complete(target, pom=pom):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MissingToolError(
            tool="mvn", package="maven", needed_for="once, to fetch the Kafka jars"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / ".lock"):
        if is_complete(target, pom=pom):
            return target
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            _run_maven(mvn=mvn, pom=pom, scratch=scratch)
            (scratch / "jars" / MARKER).write_text(_pom_digest(pom) + "\n")
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


def _run_maven(*, mvn: str, pom: Path, scratch: Path) -> None:
    # A copy of the pom in the scratch folder keeps Maven from writing into the repo.
    shutil.copyfile(pom, scratch / "pom.xml")
    argv = [
        mvn, "-q", "-B", "-f", str(scratch / "pom.xml"),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={scratch / 'jars'}",
        "-DincludeScope=runtime",
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
        raise FetchFailedError(returncode=proc.returncode, output_tail=tail)


def _pom_digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
