"""Structured Streaming's Kafka connector jars, fetched once by Maven into the cache.

The versions are pinned in ``spark_kafka_pom.xml`` beside this file. As for the
broker's jars (:mod:`e2e.kafka.jars`), Maven copies them into
``${CJOB_CACHE_DIR:-~/.cache/checkpointed-jobs}/spark-kafka/<version>/`` from a
scratch folder, the folder is moved into place whole after a marker holding the
pom's hash is written, and a folder with the marker is used without running Maven.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from e2e.kafka.jars import MARKER, MissingToolError, cache_root

POM = Path(__file__).resolve().parent / "spark_kafka_pom.xml"
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
JARS = ("spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13", "kafka-clients",
        "commons-pool2")
"""The artifacts the folder must hold, each as ``<artifact>-<version>.jar``."""


class ConnectorFetchError(RuntimeError):
    """Maven could not resolve the connector; carries the tail of its output."""


def connector_version(*, pom: Path = POM) -> str:
    """The connector's version pinned in the pom (its ``spark.kafka.version``)."""
    node = ET.parse(pom).getroot().find("m:properties/m:spark.kafka.version", _POM_NS)
    if node is None or not (node.text or "").strip():
        raise ValueError(f"{pom} has no <spark.kafka.version> property")
    return (node.text or "").strip()


def jar_dir(*, pom: Path = POM) -> Path:
    return cache_root() / "spark-kafka" / connector_version(pom=pom)


def _digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def is_complete(folder: Path, *, pom: Path = POM) -> bool:
    try:
        return (folder / MARKER).read_text().strip() == _digest(pom)
    except OSError:
        return False


def ensure_jars(*, pom: Path = POM) -> list[Path]:
    """The connector's jars, fetched first if the cache does not hold this pom's."""
    target = jar_dir(pom=pom)
    if not is_complete(target, pom=pom):
        mvn = shutil.which("mvn")
        if mvn is None:
            raise MissingToolError(tool="mvn", package="maven",
                                   needed_for="once, to fetch Spark's Kafka connector")
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            shutil.copyfile(pom, scratch / "pom.xml")
            proc = subprocess.run(
                [mvn, "-q", "-B", "-f", str(scratch / "pom.xml"), "dependency:copy-dependencies",
                 f"-DoutputDirectory={scratch / 'jars'}", "-DincludeScope=runtime"],
                cwd=scratch, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, check=False)
            if proc.returncode != 0 or not any((scratch / "jars").glob("*.jar")):
                tail = "\n".join(proc.stdout.splitlines()[-20:])
                raise ConnectorFetchError(f"Maven could not fetch Spark's Kafka connector "
                                          f"(exit code {proc.returncode}):\n{tail}")
            (scratch / "jars" / MARKER).write_text(_digest(pom) + "\n")
            shutil.rmtree(target, ignore_errors=True)
            (scratch / "jars").rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    jars = sorted(target.glob("*.jar"))
    missing = [name for name in JARS
               if not any(j.name.startswith(f"{name}-") and j.name[len(name) + 1].isdigit()
                          for j in jars)]
    if missing:
        raise ConnectorFetchError(f"{target} lacks the jars of {', '.join(missing)}")
    return jars


if __name__ == "__main__":
    print(",".join(str(j) for j in ensure_jars()))
