"""The root of the test suite: shared fixtures, and markers derived from where a test lives.

``tests/<package>/`` mirrors a package of the project; a sub-folder named after a tier
says what the tests in it need (see ``TIERS``). Nobody writes those markers by hand: a
test gets them from its path, so ``make test-unit`` and the other slices select the
same tests a reader would expect from the tree. Fixtures that tests of several
folders share are registered here, as plugins from ``tests/support/``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
TESTS = ROOT / "tests"
SUPPORT = TESTS / "support"

# Shared helpers are imported by plain module names (``runtime_harness``,
# ``operator_world``...), from any folder of the tree.
for folder in (SUPPORT, SUPPORT / "jobs"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM flags for every Spark the tests start (``SPARK_SUBMIT_OPTS``, read by
``spark-submit``, so PySpark's drivers and Structured Streaming's sessions alike).

A test's driver lives for seconds, and the JVM spends most of its CPU on start-up:
compiling Spark's start-up code with the optimising compiler (C2) and collecting with
parallel GC threads pays off only in long runs. Measured on one Spark test on 2 cores,
the driver's process tree used 24 CPU seconds (median of five) by default and 16 with
these flags. They change how fast the JVM runs, not what the job does: records flow
through the runtime's Python processes either way. A user's job keeps Spark's defaults;
a caller that sets ``SPARK_SUBMIT_OPTS`` itself keeps its own.
"""
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)

pytest_plugins = [
    "e2e.s3",
    "e2e.controlplane.pytest_plugin",
    "e2e.realnode.pytest_plugin",
    "e2e.kind.pytest_plugin",
    "e2e.kafka.pytest_plugin",
    "e2e.postgres.pytest_plugin",
    "e2e.lakereader.pytest_plugin",
    "fixtures_runtime",
    "fixtures_operator",
    "fixtures_store",
    "fixtures_charts",
]

TIERS: dict[str, tuple[str, ...]] = {
    "spark": ("spark",),
    "cluster": ("cluster",),
    "kafka": ("kafka",),
    "postgres": ("postgres",),
    "soak": ("soak",),
    "realnode": ("realnode", "cluster", "e2e"),
    "kind": ("kind", "e2e"),
    "chaos": ("chaos",),
}
"""A folder name in a test's path -> the markers every test below it gets."""

S3_FIXTURES = frozenset({"s3_server", "s3_bucket", "s3_faults"})
"""Fixtures that start the S3 API server: a test using one is marked ``s3``."""

NOT_UNIT = frozenset(marker for markers in TIERS.values() for marker in markers)

TIER_FIXTURES: dict[str, str] = {
    "control_plane": "cluster",
    "kube_rest": "cluster",
    "kube_api_client": "cluster",
    "process_node": "cluster",
    "helm_bin": "cluster",
    "kubectl_bin": "cluster",
    "real_cluster": "realnode",
    "kind_cluster": "kind",
    "kafka_broker": "kafka",
    "postgres_server": "postgres",
    "postgres_dsn": "postgres",
    "lake_reader": "spark",
}
"""Fixtures that start a tier's services: a test using one must live in that tier's folder."""


def markers_for(path: Path) -> tuple[str, ...]:
    """The markers of a test file, from the tier folders on its path below ``tests/``."""
    try:
        parts = path.resolve().relative_to(TESTS).parts[:-1]
    except ValueError:
        return ()
    found: list[str] = []
    for part in parts:
        for marker in TIERS.get(part, ()):
            if marker not in found:
                found.append(marker)
    return tuple(found)


def misplaced(item: pytest.Item, markers: tuple[str, ...]) -> str | None:
    """Why a test is in the wrong folder (it uses a service its tier does not start)."""
    for fixture in getattr(item, "fixturenames", ()):
        tier = TIER_FIXTURES.get(fixture)
        if tier is not None and tier not in markers:
            return (f"{item.nodeid} uses the fixture {fixture!r}: move it below a "
                    f"{tier}/ folder, so that its slice selects it")
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    errors: list[str] = []
    for item in items:
        markers = markers_for(item.path)
        for marker in markers:
            item.add_marker(marker)
        error = misplaced(item, markers)
        if error is not None:
            errors.append(error)
        if S3_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker("s3")
        if not NOT_UNIT.intersection(mark.name for mark in item.iter_markers()):
            item.add_marker("unit")
    if errors:
        raise pytest.UsageError("\n".join(errors))
