"""pytest fixtures for tests against a real Kafka broker.

Enable with ``"e2e.kafka.pytest_plugin"`` in ``pytest_plugins`` of the root
``conftest.py``. Fixtures:

- ``kafka_broker`` (session): one running :class:`~e2e.kafka.broker.KafkaBroker` for the
  whole run (a start costs about ten seconds); ``.bootstrap`` is its address and
  ``.restart()`` stops and starts it with its data. A test that restarts it gets it
  back serving, so the tests after it need not care.

Helpers for the tests (from :mod:`e2e.kafka.clients`): :func:`create_topic` (a fresh
topic with N partitions), :func:`read_topic` (everything a ``read_committed`` or
``read_uncommitted`` consumer sees) and :func:`transactional_producer`. Without ``java``, or without ``mvn`` on a first run, the tests that use the broker
fail with a line saying what to install rather than skip: a missing broker must not
look like a passing tier.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.kafka.broker import BrokerStartError, KafkaBroker
from e2e.kafka.clients import Record, create_topic, read_topic, transactional_producer
from e2e.kafka.jars import FetchFailedError, MissingToolError, ensure_jars, require_java

__all__ = [
    "KafkaBroker",
    "Record",
    "create_topic",
    "kafka_broker",
    "read_topic",
    "transactional_producer",
]


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    try:
        require_java()
        jars = ensure_jars()
    except (MissingToolError, FetchFailedError) as exc:
        pytest.fail(str(exc), pytrace=False)
    broker = KafkaBroker(
        work_dir=tmp_path_factory.mktemp("kafka"), jar_dir=jars, die_with_parent=True
    )
    try:
        broker.start()
    except BrokerStartError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()
