"""The Apache Kafka jars the broker runs from, fetched once by Maven into a cache.

The versions are pinned in ``pom.xml`` beside this file; :mod:`e2e.maven_jars` has
Maven resolve it with its runtime dependencies into
``${CJOB_CACHE_DIR:-~/.cache/checkpointed-jobs}/kafka/<version>/``, and a finished
folder is used without running Maven at all.
"""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

from e2e.maven_jars import (
    MARKER,
    FetchFailedError,
    MissingToolError,
    cache_root,
    classpath,
    fetch_jars,
)
from e2e.maven_jars import is_complete as _is_complete

__all__ = ["MARKER", "POM", "FetchFailedError", "MissingToolError", "cache_root", "classpath",
           "ensure_jars", "is_complete", "jar_dir", "kafka_version", "require_java"]

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def kafka_version(*, pom: Path = POM) -> str:
    """The Kafka version pinned in ``pom.xml`` (its ``kafka.version`` property)."""
    node = ET.parse(pom).getroot().find("m:properties/m:kafka.version", _POM_NS)
    if node is None or not (node.text or "").strip():
        raise ValueError(f"{pom} has no <kafka.version> property")
    return (node.text or "").strip()


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
    return _is_complete(folder, pom=pom)


def ensure_jars(*, pom: Path = POM) -> Path:
    """The folder of the pinned Kafka jars, fetching them with Maven first if need be."""
    return fetch_jars(pom=pom, target=jar_dir(pom=pom), what="the Kafka jars")
