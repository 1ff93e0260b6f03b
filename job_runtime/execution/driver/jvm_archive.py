"""A class-data archive for the driver's JVM, so that Spark starts sooner.

Starting Spark's JVM loads, parses and verifies several thousand classes from Spark's
jars; that was about a third of the driver's Spark start (3.0 s of it on 2 cores).
A dynamic class-data-sharing archive (``-XX:ArchiveClassesAtExit``, JDK 13 and later)
holds those classes already parsed and verified, and a JVM started with
``-XX:SharedArchiveFile`` maps it instead: the same start took 2.0 s.

The archive belongs to one JDK build and one class path, so its file is named after
both (the Java binary, the JDK's ``release`` file, the Spark jars and the job's own
jars). On this machine the first driver of a class path writes it as it exits (a
second or two after the job's end, once) and every later one maps it. A JVM that
finds the archive unusable (another JDK, a damaged file) starts without it, as it
would have anyway, and says nothing: the archive only ever saves time.

Drivers on Kubernetes never write one: each pod runs one driver, whose exit the dump
would only slow. They map an archive built into their image, found by the same name
under ``CJOB_JVM_ARCHIVE_DIR``. ``CJOB_JVM_ARCHIVE=off`` turns all of it off.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SWITCH_ENV = "CJOB_JVM_ARCHIVE"
"""``off`` starts the JVM without an archive and writes none."""
DIR_ENV = "CJOB_JVM_ARCHIVE_DIR"
"""Where archives are kept; by default the user's cache directory."""
OPTIONS_KEY = "spark.driver.extraJavaOptions"
CLASS_PATH_KEYS = ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath")
"""The job's settings that add to the driver's class path, so to the archive's name."""
STALE_CLAIM = 600.0
QUIET = "-Xlog:cds*=off"
"""The JVM's notes on what it could not archive, or why it cannot map an archive,
are for the JVM's developers: the job's log gets none of them."""


def archive_dir(env: Mapping[str, str]) -> Path:
    configured = env.get(DIR_ENV)
    if configured:
        return Path(configured)
    cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "checkpointed-jobs" / "jvm"


def java_binary(env: Mapping[str, str]) -> Path | None:
    """The Java binary Spark's launch scripts run: ``$JAVA_HOME/bin/java``, else ``java``."""
    home = env.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not Path(found).exists():
        return None
    return Path(found).resolve()


def spark_jars() -> list[str]:
    """The names of the jars on Spark's own class path."""
    import pyspark

    home = os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)
    jars = Path(home) / "jars"
    return sorted(p.name for p in jars.glob("*.jar")) if jars.is_dir() else []


def archive_name(*, java: Path, spark_conf: Mapping[str, str], jars: list[str]) -> str:
    """The archive's file name: a digest of what decides whether a JVM can map it."""
    digest = hashlib.sha256()
    digest.update(str(java).encode())
    release = java.parent.parent / "release"
    if release.is_file():
        digest.update(release.read_bytes())
    for jar in jars:
        digest.update(b"\0" + jar.encode())
    for key in CLASS_PATH_KEYS:
        digest.update(f"\0{key}={spark_conf.get(key, '')}".encode())
    return f"spark-driver-{digest.hexdigest()[:20]}.jsa"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArchivePlan:
    """What this driver's JVM does with the archive: map it, or write it as it exits."""

    path: Path
    writing: Path | None = None
    """The file the JVM writes at its exit (renamed to :attr:`path` once complete);
    ``None`` when the JVM maps :attr:`path`."""

    def java_options(self) -> str:
        if self.writing is None:
            return f"-XX:SharedArchiveFile={self.path} {QUIET}"
        return f"-XX:ArchiveClassesAtExit={self.writing} {QUIET}"


def plan_archive(*, spark_conf: Mapping[str, str], may_write: bool,
                 env: Mapping[str, str] | None = None) -> ArchivePlan | None:
    """The archive this driver's JVM maps or writes, ``None`` for neither (turned off,
    no Java found, the job chose an archive of its own, or none exists and this
    driver may not write one)."""
    env = os.environ if env is None else env
    if env.get(SWITCH_ENV, "").strip().lower() == "off":
        return None
    if "SharedArchiveFile" in spark_conf.get(OPTIONS_KEY, "") or \
            "ArchiveClassesAtExit" in spark_conf.get(OPTIONS_KEY, ""):
        return None
    java = java_binary(env)
    if java is None:
        return None
    path = archive_dir(env) / archive_name(java=java, spark_conf=spark_conf, jars=spark_jars())
    if path.is_file():
        return ArchivePlan(path=path)
    if not may_write:
        return None
    writing = path.with_name(f"{path.name}.writing")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _claim(writing)
    except OSError as exc:  # another driver writes it, or the directory is not ours
        log.debug("no class-data archive this time: %s", exc)
        return None
    return ArchivePlan(path=path, writing=writing)


def _claim(writing: Path) -> None:
    """Make ``writing`` this driver's, or raise: one driver writes an archive at a time
    (drivers that start together would each spend seconds writing the same one). A
    claim older than :data:`STALE_CLAIM` seconds is of a driver that was killed."""
    try:
        if time.time() - writing.stat().st_mtime > STALE_CLAIM:
            writing.unlink(missing_ok=True)
    except FileNotFoundError:
        pass
    os.close(os.open(writing, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))


def with_archive(spark_conf: Mapping[str, str], plan: ArchivePlan | None) -> dict[str, str]:
    """The job's Spark settings with the archive's options after the job's own."""
    conf = dict(spark_conf)
    if plan is not None:
        conf[OPTIONS_KEY] = f"{conf.get(OPTIONS_KEY, '')} {plan.java_options()}".strip()
    return conf


def finish_archive(plan: ArchivePlan | None, *, gateway: Any, timeout: float = 60.0) -> None:
    """After Spark stopped: let a JVM that writes the archive end and write it, then put
    the archive in place. Anything that goes wrong costs only the archive."""
    if plan is None or plan.writing is None:
        return
    proc = getattr(gateway, "proc", None)
    try:
        if proc is None:
            return
        try:
            gateway.shutdown()
        except Exception:  # the gateway may be gone already; the JVM still exits
            pass
        if proc.stdin is not None:
            proc.stdin.close()  # the JVM's cue to exit, and to write the archive
        proc.wait(timeout=timeout)
        if plan.writing.is_file() and plan.writing.stat().st_size > 0:
            os.replace(plan.writing, plan.path)  # atomic: a concurrent driver maps all or none
            log.info("wrote the JVM's class-data archive %s for later starts", plan.path)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("no class-data archive: %s", exc)
    finally:
        plan.writing.unlink(missing_ok=True)
