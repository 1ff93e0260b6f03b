"""A real Apache Kafka broker for tests and local runs, from Maven-fetched jars, without Docker.

``KafkaBroker`` runs one KRaft node (broker and controller) on loopback; ``ensure_jars``
fetches its pinned jars once into the cache; ``create_topic``, ``read_topic`` and
``transactional_producer`` are the tests' helpers. ``python -m e2e.kafka up|down|status``
runs one in the background. See ``README.md``.
"""

from e2e.kafka.broker import BrokerStartError, KafkaBroker
from e2e.kafka.clients import Record, create_topic, read_topic, transactional_producer
from e2e.kafka.jars import FetchFailedError, MissingToolError, ensure_jars

__all__ = [
    "BrokerStartError",
    "FetchFailedError",
    "KafkaBroker",
    "MissingToolError",
    "Record",
    "create_topic",
    "ensure_jars",
    "read_topic",
    "transactional_producer",
]
