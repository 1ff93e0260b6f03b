"""Structured Streaming's Kafka connector jars, fetched once by Maven into the cache.

The versions are pinned in ``spark_kafka_pom.xml`` beside this file. As for the
broker's jars, :mod:`e2e.maven_jars` fetches them into
``${CJOB_CACHE_DIR:-~/.cache/checkpointed-jobs}/spark-kafka/<version>/`` once.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from e2e.maven_jars import FetchFailedError, cache_root, fetch_jars

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


def ensure_jars(*, pom: Path = POM) -> list[Path]:
    """The connector's jars, fetched first if the cache does not hold this pom's."""
    target = jar_dir(pom=pom)
    try:
        fetch_jars(pom=pom, target=target, what="Spark's Kafka connector")
    except FetchFailedError as exc:
        raise ConnectorFetchError(str(exc)) from exc
    jars = sorted(target.glob("*.jar"))
    missing = [name for name in JARS
               if not any(j.name.startswith(f"{name}-") and j.name[len(name) + 1].isdigit()
                          for j in jars)]
    if missing:
        raise ConnectorFetchError(f"{target} lacks the jars of {', '.join(missing)}")
    return jars


if __name__ == "__main__":
    print(",".join(str(j) for j in ensure_jars()))
